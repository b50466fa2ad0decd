"""Promotion ASHA and PASHA (issue 50): their decisions over fixed curves, their state across a resume, the slot
they owe a promotion, and the refusals of a checkpoint cadence that misses a rung. No Ray cluster."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from sweeps.execution.tuning.ladder import CONTINUE, PAUSE, STOP, Ladder, milestones


def ladder(epsilon: float | None = None) -> Ladder:
    return Ladder(milestones(27, 1, 3), 3, epsilon)  # rungs 1, 3, 9; ends at 27


def test_milestones_are_asha_rungs_ending_at_max_t() -> None:
    assert milestones(27, 1, 3) == [1, 3, 9, 27]
    assert milestones(10, 2, 2) == [2, 4, 8, 10]


def test_a_trial_pauses_at_each_rung_and_stops_at_max_t() -> None:
    lad = ladder()
    assert lad.result("a", 1, 0.5) == PAUSE
    lad.promote("a")
    assert [lad.result("a", t, 0.5) for t in (2, 3)] == [CONTINUE, PAUSE]
    lad.promote("a")
    assert lad.result("a", 27, 0.5) == STOP


def test_no_promotion_until_a_trial_is_in_its_rungs_top_third_then_the_best_first() -> None:
    lad = ladder()
    lad.result("a", 1, 0.2)
    lad.result("b", 1, 0.9)
    assert lad.promotable() == [], "2 trials at a rung with reduction 3: none in the top third, a new trial starts"
    lad.result("c", 1, 0.5)
    assert lad.promotable() == ["b"]
    lad.promote("b")
    assert lad.promotable() == [], "b is promoted once"
    for i, score in enumerate([0.1, 0.1, 0.95]):
        lad.result(f"n{i}", 1, score)
    assert lad.promotable() == ["n2"], "6 at the rung: its top two are b (promoted) and n2"


def test_the_highest_rung_promotes_first() -> None:
    lad = ladder()
    for tid, score in zip("abcdefghi", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9], strict=True):
        lad.result(tid, 1, score)
    for tid in ("i", "h", "g"):
        lad.promote(tid)
        assert lad.result(tid, 3, {"i": 0.99, "h": 0.1, "g": 0.2}[tid]) == PAUSE
    lad.result("j", 1, 0.95)
    assert lad.promotable() == ["i", "j"], "rung 3 holds 3 trials: its best is promoted before rung 1's"


def test_the_decisions_do_not_depend_on_the_order_results_arrive() -> None:
    scores = {f"t{i}": (i * 7 % 9) / 10 for i in range(9)}
    seen = set()
    for order in itertools.islice(itertools.permutations(scores), 0, 720, 97):
        lad = ladder()
        for tid in order:
            lad.result(tid, 1, scores[tid])
        seen.add(tuple(lad.promotable()))
    assert len(seen) == 1


def test_pasha_raises_its_top_only_while_the_top_two_rungs_disagree() -> None:
    lad = ladder(epsilon=0.0)
    assert lad.max_t == 3
    for tid, score in zip("abc", [0.9, 0.5, 0.1], strict=True):
        lad.result(tid, 1, score)
    lad.promote("a")
    assert lad.result("a", 3, 0.95) == PAUSE and lad.max_t == 3, "one trial at the top: nothing to disagree on"
    for tid, score in zip("def", [0.8, 0.4, 0.3], strict=True):
        lad.result(tid, 1, score)
    lad.promote("d")
    lad.result("d", 3, 0.96)
    assert lad.max_t == 3 + 6, "a beat d at rung 1 and d beats a at rung 3: raised to 9"
    assert lad.raises == [{"to": 9.0, "trials_compared": 2}]


def test_pasha_keeps_its_top_when_the_rankings_agree_within_epsilon() -> None:
    for eps, raised in ((0.0, True), (0.05, False)):
        lad = ladder(epsilon=eps)
        for tid, score in zip("abcdef", [0.9, 0.88, 0.1, 0.1, 0.1, 0.1], strict=True):
            lad.result(tid, 1, score)
        for tid, top in (("a", 0.90), ("b", 0.92)):
            lad.promote(tid)
            lad.result(tid, 3, top)
        assert (lad.max_t > 3) is raised, eps


def test_the_state_is_json_by_trial_id_and_comes_back_whole() -> None:
    import json

    lad = ladder(epsilon=0.01)
    for tid, score in zip("abcdef", [0.9, 0.5, 0.1, 0.8, 0.4, 0.3], strict=True):
        lad.result(tid, 1, score)
    lad.promote("a")
    lad.result("a", 3, 0.2)
    back = Ladder.from_state(json.loads(json.dumps(lad.state())))
    assert back.state() == lad.state() and back.promotable() == lad.promotable()


# --- the Tune scheduler over a fake controller -----------------------------------------------------------

class _Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id, self.status = trial_id, "PENDING"


class _Controller:
    def __init__(self, finished: bool = False) -> None:
        self.trials: list[_Trial] = []
        self.stopped: list[str] = []
        self.search_alg = SimpleNamespace(is_finished=lambda: finished)

    def get_trials(self) -> list[_Trial]:
        return self.trials

    def stop_trial(self, trial: _Trial) -> None:
        self.stopped.append(trial.trial_id)
        trial.status = "TERMINATED"


def _scheduler(kind: str = "PromotionASHA", **kw: Any) -> Any:
    from sweeps.execution.tuning import promotion

    sched = getattr(promotion, kind)(max_t=27, grace_period=1, reduction_factor=3, **kw)
    sched.set_search_properties("loss", "min")
    return sched


def _report(sched: Any, ctl: _Controller, tid: str, t: int, loss: float) -> str:
    trial = next(x for x in ctl.trials if x.trial_id == tid)
    said = sched.on_trial_result(ctl, trial, {"training_iteration": t, "loss": loss})
    if said == "PAUSE":
        trial.status = "PAUSED"
    return str(said)


def _paused_at_rung_1(sched: Any, ctl: _Controller, losses: dict[str, float]) -> None:
    """Each trial added, run and paused at the first rung with its loss."""
    for tid, loss in losses.items():
        ctl.trials.append(_Trial(tid))
        ctl.trials[-1].status = "RUNNING"
        _report(sched, ctl, tid, 1, loss)


def test_the_scheduler_pauses_at_rungs_and_promotes_the_best_paused_trial_into_a_free_slot() -> None:
    sched, ctl = _scheduler(), _Controller()
    for tid, loss in (("a", 0.3), ("b", 0.1), ("c", 0.2)):
        ctl.trials.append(_Trial(tid))
        assert sched.choose_trial_to_run(ctl).trial_id == tid, "a new trial is pending: it runs"
        ctl.trials[-1].status = "RUNNING"
        assert _report(sched, ctl, tid, 1, loss) == "PAUSE"
    assert sched.promotable_count() == 1
    chosen = sched.choose_trial_to_run(ctl)
    assert chosen.trial_id == "b", "the lowest loss of rung 1 is promoted"
    assert sched.promotable_count() == 0 and sched.choose_trial_to_run(ctl) is None


def test_pasha_says_where_it_stopped_raising() -> None:
    sched = _scheduler("PASHA", epsilon=0.0)
    assert sched.current_max_t == 3
    assert "current max training_iteration=3 (raised to: none)" in sched.describe()


def test_the_state_survives_a_resume_through_the_sweeps_scheduler_state() -> None:
    from sweeps.execution.run import schedstate

    sched, ctl = _scheduler("PASHA", epsilon=0.0), _Controller()
    _paused_at_rung_1(sched, ctl, {"a": 0.3, "b": 0.1, "c": 0.2})
    sched.choose_trial_to_run(ctl)
    saved = schedstate.snapshot(sched)
    assert saved["how"] == "own", "its public save/restore is used, no lever"
    fresh = _scheduler("PASHA", epsilon=0.0)
    assert schedstate.apply(fresh, saved, {}) is None
    assert fresh.ladder.state() == sched.ladder.state()
    other = _scheduler("PASHA", epsilon=0.0)
    other.ladder = Ladder(milestones(81, 1, 3), 3, 0.0)
    assert "could not be put back" in (schedstate.apply(other, saved, {}) or "")


def test_a_requeued_waiting_trial_pauses_again_at_its_first_result() -> None:
    lad = ladder()
    for tid, score in zip("ab", [0.9, 0.5], strict=True):
        lad.result(tid, 1, score)
    assert lad.result("a", 2, 0.9) == PAUSE, "Tune requeues every unfinished trial on resume: a waits again"


def test_a_new_trial_is_made_only_when_no_promotion_is_owed(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.run import concurrency

    owed = {"n": 2}
    inner = SimpleNamespace(promotable_count=lambda: owed["n"])
    monkeypatch.setattr(concurrency, "session", lambda name: SimpleNamespace(scheduler=SimpleNamespace(inner=inner)))
    made = concurrency.PromotionsFirst(concurrency.Fixed(2), "run")
    assert made() == 0
    owed["n"] = 0
    assert made() == 2
    assert concurrency.promotes(inner) and not concurrency.promotes(object())


# --- validation ----------------------------------------------------------------------------------------

BAD = [
    (["scheduler=asha_promote", "trainable.checkpoint_every=2"],
     "trainable.checkpoint_every (2) does not land on every rung of scheduler=asha_promote (it pauses at 1, 3, 9; "
     "no checkpoint at 1, 3, 9)"),
    (["scheduler=pasha", "scheduler.grace_period=2", "scheduler.reduction_factor=2", "trainable.checkpoint_every=4"],
     "set trainable.checkpoint_every=2 (it divides every rung)"),
    (["scheduler=asha_promote", "scheduler.reduction_factor=1.5", "trainable.checkpoint_every=2"],
     "set trainable.checkpoint_every=1 (the rungs are not whole multiples of one another)"),
    (["scheduler=pasha", "scheduler.epsilon=-0.1"], "scheduler.epsilon: must be >= 0 (a difference of the metric), "
     "got -0.1"),
    (["scheduler=asha_promote", "scheduler.reduction_factor=1"], "scheduler.reduction_factor: must be > 1, got 1"),
    (["scheduler=pasha", "scheduler.grace_period=20"], "scheduler.grace_period (20) must be <= scheduler.max_t (10)"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_promotion_settings_exit_2_naming_key_value_and_fix(
    overrides: list[str], needle: str, capsys: pytest.CaptureFixture[str], sweeps_env: Any
) -> None:
    from sweeps.cli import main as cli_main

    assert cli_main.main(["run", *overrides, "--dry-run"]) == 2
    assert needle in capsys.readouterr().err


def test_the_bundled_promotion_schedulers_validate_and_build(sweeps_env: Any) -> None:
    from sweeps.config import build as config_build
    from sweeps.config import compose
    from sweeps.execution.tuning.searchers import build_scheduler

    for name, kind in (("asha_promote", "PromotionASHA"), ("pasha", "PASHA")):
        spec = config_build.build_spec(compose.compose([f"scheduler={name}"]))
        sched = build_scheduler(spec)
        assert type(sched).__name__ == kind and sched.ladder.levels == [1, 3, 9, 10]


def test_with_the_search_over_and_no_trial_at_the_top_the_best_of_the_highest_rung_goes_on() -> None:
    sched, ctl = _scheduler(), _Controller(finished=True)
    _paused_at_rung_1(sched, ctl, {"a": 0.3, "b": 0.1})
    chosen = sched.choose_trial_to_run(ctl)
    assert chosen.trial_id == "b" and ctl.stopped == [], "2 trials, reduction 3: none in the top third"
    chosen.status = "RUNNING"
    for t in (3, 9):
        _report(sched, ctl, "b", t, 0.05)
        assert sched.choose_trial_to_run(ctl).trial_id == "b"
        chosen.status = "RUNNING"
    assert sched.on_trial_result(ctl, chosen, {"training_iteration": 27, "loss": 0.01}) == "STOP"
    chosen.status = "TERMINATED"
    assert sched.choose_trial_to_run(ctl) is None and ctl.stopped == ["a"], "one trial reached max_t: a lost"


def test_a_trial_the_sweeps_stopper_ends_at_max_t_counts_at_the_top_rung() -> None:
    """Tune asks the stopper before the scheduler: the last result reaches the scheduler only as the completion."""
    sched, ctl = _scheduler(), _Controller(finished=True)
    _paused_at_rung_1(sched, ctl, {"a": 0.3, "b": 0.1})
    b = ctl.trials[1]
    sched.on_trial_complete(ctl, b, {"training_iteration": 27, "loss": 0.01})
    b.status = "TERMINATED"
    assert sched.choose_trial_to_run(ctl) is None and ctl.stopped == ["a"]


def test_an_extension_forgets_the_earlier_experiments_waiting_trials_but_keeps_their_results() -> None:
    from sweeps.execution.run import schedstate

    sched, ctl = _scheduler(), _Controller()
    _paused_at_rung_1(sched, ctl, {"a": 0.3, "b": 0.1, "c": 0.2})
    fresh, new = _scheduler(), _Controller()
    assert schedstate.apply(fresh, schedstate.snapshot(sched), {}) is None
    assert fresh.promotable_count() == 1, "b is owed a promotion, as saved"
    assert fresh.choose_trial_to_run(new) is None and fresh.promotable_count() == 0, "b is not in this experiment"
    new.trials.append(_Trial("d"))
    new.trials[-1].status = "RUNNING"
    assert _report(fresh, new, "d", 1, 0.05) == "PAUSE" and fresh.promotable_count() == 1, "4 at rung 1: d is best"


def test_the_report_counts_trials_promotions_and_epochs_per_rung_and_says_where_pasha_stopped() -> None:
    from sweeps.execution.run import schedstate
    from sweeps.reports.rungs import rung_section

    sched, ctl = _scheduler("PASHA", epsilon=0.0), _Controller()
    _paused_at_rung_1(sched, ctl, {"a": 0.3, "b": 0.1, "c": 0.2})
    assert sched.choose_trial_to_run(ctl).trial_id == "b"
    _report(sched, ctl, "b", 3, 0.05)
    found = rung_section(schedstate.snapshot(sched))
    assert found is not None and found.title == "Rungs"
    assert found.tables[0].rows[:2] == [["1", "3", "1", "3"], ["3", "1", "0", "2"]]
    assert "epochs trained to reach the rungs: 5" in found.bullets[0]
    assert "PASHA stopped raising its top rung at 3 of 27 (raised to: never raised; epsilon 0)" in found.bullets[1]
    more = rung_section(schedstate.snapshot(sched), trained=7)
    assert "epochs the trials trained in all: 7 (2 past the rungs counted" in more.bullets[1], more.bullets
    assert len(rung_section(schedstate.snapshot(sched), trained=5).bullets) == 2, "as many as the rungs: no line"
    assert rung_section(schedstate.snapshot(_fifo())) is None


def _fifo() -> Any:
    from ray.tune.schedulers import FIFOScheduler

    return FIFOScheduler()


def test_a_requeued_waiting_trial_that_ran_on_to_the_next_rung_counts_there_only_once_promoted() -> None:
    """Rungs one epoch apart: Tune's requeue on resume runs a waiting trial onto the next rung. Its result there is
    kept aside, so the rung tables and promotions are a straight run's, and the epoch is not trained again."""
    lad = Ladder(milestones(6, 1, 2), 2)  # rungs 1, 2, 4; ends at 6
    for tid, score in zip("abcd", [0.9, 0.8, 0.5, 0.4], strict=True):
        lad.result(tid, 1, score)
    assert lad.result("c", 2, 0.6) == PAUSE and lad.rungs[1] == {} and lad.waiting.count("c") == 1
    assert lad.promotable() == ["a", "b"]
    lad.promote("a")
    lad.result("a", 2, 0.95)
    for tid in ("e", "f", "g", "h"):
        lad.result(tid, 1, 0.1)
    assert "c" in lad.promotable()
    lad.promote("c")
    assert lad.rungs[1]["c"] == 0.6 and lad.waits("c"), "c counts at rung 2 with its run-on result, and waits there"


def test_a_promoted_trial_that_a_resume_ran_on_to_the_next_rung_waits_there_and_the_next_best_runs() -> None:
    from sweeps.execution.tuning.promotion import PromotionASHA

    sched, ctl = PromotionASHA(max_t=6, grace_period=1, reduction_factor=2), _Controller()
    sched.set_search_properties("loss", "min")
    _paused_at_rung_1(sched, ctl, {"a": 0.1, "b": 0.05, "c": 0.3, "d": 0.4})
    b = ctl.trials[1]
    b.status = "RUNNING"  # Tune's requeue on resume
    assert _report(sched, ctl, "b", 2, 0.04) == "PAUSE"
    chosen = sched.choose_trial_to_run(ctl)
    assert chosen.trial_id == "a", "b counts at rung 2 (alone there: not promotable) without training again"
    assert sched.ladder.level_of["b"] == 1 and sched.ladder.waits("b")


@pytest.mark.parametrize(("target", "ok"), [
    ("sweeps.execution.tuning.promotion.PASHA", True),
    ("sweeps.execution.tuning.promotion.PromotionASHA", True),
    ("sweeps.execution.tuning.promotion.json.loads", False),
    ("sweeps.execution.tuning.promotion.Ladder", False),
    ("sweeps.execution.tuning.ladder.Ladder", False),
    ("sweeps.ops.install.install", False),
])
def test_only_the_promotion_schedulers_of_sweeps_are_targets(target: str, ok: bool) -> None:
    from sweeps.config import security

    assert (security.check_targets({"scheduler": {"_target_": target}}) == []) is ok
