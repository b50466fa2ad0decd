"""What a resumed or extended sweep carries over, without a sweep: the time budget, the trials before it, the
grid's exact count, Tune's pending-trial limit. Real Tune classes (its grid generator, its Stopper), real
pickling; the slow tier (tests/test_resume_decisions_slow.py) checks whole sweeps. Fast tier.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeps.execution.run import budget, session, wrappers


def _grid(limit: int | None, tmp_path: Path) -> object:
    from ray import tune
    from ray.tune.experiment import Experiment
    from ray.tune.search.basic_variant import BasicVariantGenerator

    def loop(config: dict) -> None:
        pass

    gated = wrappers.gated_variants(BasicVariantGenerator(), [])
    gated.limit = limit
    gated.add_configurations([Experiment("e", loop, config={"lr": tune.grid_search([1, 2, 3, 4, 5, 6])},
                                         num_samples=2, storage_path=str(tmp_path / "ray"))])
    return gated


def _drain(gated: object) -> list[dict]:
    out = []
    while not gated.is_finished():
        trial = gated.next_trial()
        if trial is None:
            break
        out.append(trial.config)
    return out


def test_extend_more_trials_2_on_a_grid_adds_exactly_2_trials(tmp_path: Path) -> None:
    assert len(_drain(_grid(None, tmp_path))) == 12, "num_samples counts passes over a grid: 2 x 6"
    gated = _grid(2, tmp_path)
    assert _drain(gated) == [{"lr": 1}, {"lr": 2}] and gated.is_finished() and gated.total_samples == 2
    assert not hasattr(gated, "_finished") or type(gated)._finished is False, "Tune's private flag is not used"


def test_a_resumed_capped_grid_hands_out_only_what_its_cap_left(tmp_path: Path) -> None:
    gated = _grid(2, tmp_path)
    gated.next_trial()
    saved = tmp_path / "state"
    saved.mkdir()
    gated.save_to_dir(str(saved), session_str="2026-01-01")
    again = _grid(2, tmp_path)  # the Tuner's pickled copy, as Tuner.restore unpickles it
    again.restore_from_dir(str(saved))
    assert again.handed == 1 and len(_drain(again)) == 1


def test_the_time_budget_goes_on_from_what_the_sweep_counted_less_pauses() -> None:
    idle = [0.0]
    clock = budget.Clock(100.0, before_s=60.0, idle=lambda: idle[0], now=1000.0)
    assert clock.used(1030.0) == 90.0 and not clock.spent(1030.0) and clock.left(1030.0) == 10.0
    idle[0] = 20.0  # paused with nothing running for 20 s of those
    assert clock.used(1030.0) == 70.0 and not clock.spent(1045.0)
    assert clock.spent(1060.0)


def test_the_sweeps_stopper_stops_every_trial_once_its_clock_is_spent_also_after_a_restore() -> None:
    import ray.cloudpickle as cloudpickle

    class Inner:
        def __call__(self, trial_id: str, result: dict) -> bool:
            return result.get("training_iteration", 0) >= 3

        def stop_all(self) -> bool:
            return False

    name = "s-budget"
    live = session.start(name)
    live.clock = budget.Clock(100.0, before_s=0.0)
    stopper = budget.sweep_stopper(name, Inner())
    assert not stopper.stop_all() and stopper("t", {"training_iteration": 3})
    restored = cloudpickle.loads(cloudpickle.dumps(stopper))  # Tuner.restore: the resuming run's session decides
    session.start(name).clock = budget.Clock(100.0, before_s=99.0, now=0.0)
    assert restored.stop_all(), "the sweep counted 99 s before and the resumed run more: spent"
    session.start(name)
    assert not restored.stop_all(), "no clock (no budget): never"


def test_resume_and_extend_carry_the_seconds_the_sweep_counted() -> None:
    from sweeps.execution.run import callbacks

    name = "s-carry"
    session.start(name).clock = budget.Clock(600.0)
    from sweeps.store import SweepRecord

    rec = SweepRecord("s", "e", 0.0, "interrupted", "", [], "", wall_s=120.0)  # an older record: its wall time
    callbacks.carry_budget(name, rec.counted_s)
    assert session.session(name).clock.before_s == 120.0
    callbacks.carry_budget(name, SweepRecord("s", "e", 0.0, "interrupted", "", [], "", running_s=90.0,
                                             wall_s=120.0).counted_s)
    assert session.session(name).clock.before_s == 90.0


def test_resume_limits_tunes_pending_trials_as_the_first_run_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.tuning import tuner

    monkeypatch.setattr(tuner, "USER_PENDING", None)
    monkeypatch.delenv("TUNE_MAX_PENDING_TRIALS_PG", raising=False)
    tuner.limit_pending(SimpleNamespace(concurrent_trials=3))  # type: ignore[arg-type]
    assert os.environ["TUNE_MAX_PENDING_TRIALS_PG"] == "3"
    monkeypatch.setattr(tuner, "USER_PENDING", "7")
    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "7")
    tuner.limit_pending(SimpleNamespace(concurrent_trials=3))  # type: ignore[arg-type]
    assert os.environ["TUNE_MAX_PENDING_TRIALS_PG"] == "7", "a value the user set wins"


def _trial(trial_id: str, status: str, lr: float, value: float | None, iterations: int = 6) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, status=status, config={"lr": lr},
                           last_result={"training_iteration": iterations},
                           metric_analysis={"score": {"max": value}} if value is not None else {})


def test_the_status_line_and_the_live_status_of_an_extension_count_and_rank_every_trial(tmp_path: Path) -> None:
    from sweeps.execution.run import livestatus
    from sweeps.execution.run.progress import Progress, progress_callback

    name = "s-ext1"
    live = session.start(name)
    live.earlier_trials = [_trial("a", "TERMINATED", 0.05, 1.007), _trial("b", "TERMINATED", 0.02, 0.5, 2),
                                     _trial("c", "RUNNING", 0.01, 0.1, 1)]  # c: an abandoned (unrestorable) run's
    progress = Progress("score", "max", 2, 6, str(tmp_path / "log.jsonl"))
    now = [_trial("d", "RUNNING", 0.03, 0.705, 2)]
    callback = progress_callback(progress, name)
    callback.on_experiment_end(now)
    assert progress.best is not None and progress.best[:2] == (1.007, "a"), "the best before the extension"
    line = progress.line([t.status for t in [*session.earlier(name), *now]], progress.early(session.earlier(name)))
    assert line.startswith("trials: 1 running, 2 done (1 stopped early), 0 failed"), line
    live.planned = 4
    record = livestatus._LiveRecord(name, "s", str(tmp_path / name), {"CPU": 1.0}, progress, 2)
    status = record.status(now)
    assert status["trials"] == {"running": 1, "waiting": 0, "done": 1, "stopped_early": 1, "failed": 0,
                                "planned": 4}, status["trials"]
    assert status["best"]["trial_id"] == "a" and status["held"]["CPU"] == 1.0


def test_an_earlier_experiments_unfinished_trials_do_not_make_a_later_run_interrupted(tmp_path: Path) -> None:
    from sweeps.execution.run import recovery

    first, second = tmp_path / "s", tmp_path / "s-ext1"
    records = [SimpleNamespace(status="RUNNING", path=str(first / "t1")),
               SimpleNamespace(status="TERMINATED", path=str(second / "t2"))]
    assert recovery.unfinished_in(records, str(second)) == 0
    assert recovery.unfinished_in(records, str(first)) == 1
    records.append(SimpleNamespace(status="PENDING", path=None))  # never started: this run's
    assert recovery.unfinished_in(records, str(second)) == 1
    pickle.dumps(records)


def test_extend_with_no_saved_scheduler_state_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from ray.tune.schedulers import ASHAScheduler

    from sweeps.execution.run import schedstate
    from sweeps.execution.run.owner import carry_scheduler

    name = "s-ext2"
    session.start(name).scheduler = SimpleNamespace(inner=ASHAScheduler(max_t=6))
    (tmp_path / "first").mkdir()  # an earlier experiment that saved no scheduler state
    with caplog.at_level(logging.WARNING):
        carry_scheduler(name, [str(tmp_path / "first")])
        schedstate.callback(name, str(tmp_path / "ext")).on_step_begin(0, [])
    said = [r.getMessage() for r in caplog.records if "AsyncHyperBandScheduler" in r.getMessage()]
    assert len(said) == 1 and "starts the extension with its rungs empty" in said[0] and \
        "the added trials are not judged" in said[0], said


def test_a_stop_with_no_trial_unfinished_finishes_the_search_only_while_it_holds(tmp_path: Path) -> None:
    """With no trial running, paused or pending, Tune's loop waits within one step (up to 600 s) for the search
    algorithm's next trial and reads its interrupted event only between steps: a stop asked then (seen in CI: the
    last trial ended as ``sweeps stop`` applied; the driver hung) must finish the search, for random/grid search
    (the gated generator) and a model-based searcher (Optuna, in Tune's SearchGenerator) alike; while a trial is
    unfinished it must not (a scheduler that acts on a finished search would decide otherwise), and the saved
    state is not finished (a resume makes the rest of the trials); both survive pickling (``tuner.pkl``)."""
    import ray.cloudpickle as cloudpickle
    from ray.tune.search import SearchGenerator
    from ray.tune.search.optuna import OptunaSearch

    from sweeps.execution.run import control

    name = "halting-test"
    live = session.start(name)
    halted = control.halted(name)

    def optuna(wrap: object) -> object:
        from optuna.distributions import FloatDistribution
        from ray.tune.experiment import Experiment

        alg = wrap(OptunaSearch({"lr": FloatDistribution(0.001, 0.1)}, metric="m", mode="max", seed=0))
        alg.add_configurations([Experiment("e", lambda config: None, num_samples=6,
                                           storage_path=str(tmp_path / "ray"))])
        return alg

    algs = {"grid": wrappers.halting(_grid(None, tmp_path), halted),
            "optuna": optuna(lambda s: wrappers.halting(s, halted))}
    assert isinstance(algs["optuna"], SearchGenerator)
    trial = SimpleNamespace(status="RUNNING")
    live.callbacks["live"] = SimpleNamespace(trials=[trial])
    try:
        assert not any(a.is_finished() for a in algs.values()), "no stop asked"
        live.interrupt.set()  # as `sweeps stop` and SIGTERM ask it
        assert not any(a.is_finished() for a in algs.values()), "a trial is still unfinished"
        assert not session.outcome(name).halted
        trial.status = "TERMINATED"
        assert all(a.is_finished() for a in algs.values()), "a stop with nothing unfinished ends Tune's wait"
        assert session.outcome(name).halted, "the run ends interrupted: its search had trials to make"
        for kind, alg in algs.items():
            saved = tmp_path / kind
            saved.mkdir()
            alg.save_to_dir(str(saved), session_str="2026-01-01")
            assert cloudpickle.loads(cloudpickle.dumps(alg)).is_finished(), kind
            fresh = _grid(None, tmp_path) if kind == "grid" else optuna(SearchGenerator)
            fresh.restore_from_dir(str(saved))
            assert not fresh.is_finished(), (kind, "the saved search is not finished: a resume goes on")
    finally:
        session.end(name)
    assert not any(a.is_finished() for a in algs.values()), "another run of the sweep: no stop asked of it"
