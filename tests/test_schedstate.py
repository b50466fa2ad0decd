"""The scheduler's state across a resume, and damaged state recovered, without a sweep. Fast tier.

Real Tune schedulers, real ``Trial`` objects (Tune's own class, as a restored experiment makes them), real
pickling; the slow tier (tests/test_resume_decisions_slow.py) checks the decisions of whole sweeps.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from sweeps.errors import BadInput
from sweeps.execution.tuning import recovery, schedstate


def _trial(trial_id: str, lr: float):  # noqa: ANN202
    from ray.tune.experiment import Trial

    return Trial("run_trial", config={"lr": lr}, trial_id=trial_id, stub=True)


def _feed(scheduler, trials, epochs: int = 3) -> None:  # noqa: ANN001
    controller = type("C", (), {"get_live_trials": lambda self: [], "get_trials": lambda self: trials,
                                "search_alg": None})()
    scheduler.set_search_properties("score", "max")
    for t in trials:
        scheduler.on_trial_add(controller, t)
    for epoch in range(1, epochs + 1):
        for i, t in enumerate(trials):
            scheduler.on_trial_result(controller, t, {"training_iteration": epoch, "score": i * epoch,
                                                      "time_total_s": float(epoch)})


@pytest.mark.parametrize("lever", ["on", "off"])
def test_asha_keeps_its_rungs_through_its_own_save_and_restore_either_way(lever: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.schedulers import ASHAScheduler

    if lever == "off":
        monkeypatch.setenv("SWEEPS_LEVERS_OFF", "all")
    trials = [_trial(f"t{i}", 0.1) for i in range(3)]
    before = ASHAScheduler(time_attr="training_iteration", max_t=6, grace_period=1, reduction_factor=2)
    _feed(before, trials)
    state = pickle.loads(pickle.dumps(schedstate.snapshot(before)))
    assert state["how"] == "own", "ASHA's own save/restore: public, no lever needed"
    after = ASHAScheduler(time_attr="training_iteration", max_t=6, grace_period=1, reduction_factor=2)
    assert schedstate.apply(after, state, {}) is None
    assert after.debug_string() == before.debug_string() and "Iter 2.000: 2.0" in after.debug_string()


@pytest.mark.parametrize("kind", ["hyperband", "median", "pbt"])
def test_a_scheduler_without_save_restore_comes_back_through_the_lever_with_the_restored_trials(kind: str) -> None:
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining

    from sweeps.execution.levers import scheduler_state

    make = {"hyperband": lambda: HyperBandScheduler(time_attr="training_iteration", max_t=6),
            "median": lambda: MedianStoppingRule(time_attr="training_iteration", grace_period=1),
            "pbt": lambda: PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=100,
                                                   hyperparam_mutations={"lr": [0.1, 0.01]})}[kind]
    trials = [_trial(f"t{i}", 0.1) for i in range(4)]
    before = make()
    _feed(before, trials)
    state = pickle.loads(pickle.dumps(schedstate.snapshot(before)))
    assert state["how"] == "lever"
    restored = [_trial(t.trial_id, 0.1) for t in trials]  # a resumed run's Trial objects: new ones, same ids
    after = make()
    assert schedstate.apply(after, state, {t.trial_id: t for t in restored}) is None
    assert after.debug_string() == before.debug_string()
    if kind == "pbt":
        assert scheduler_state.population(after) == scheduler_state.population(before)
        assert set(after._trial_state) == set(restored), "keyed by the restored trials"
    assert schedstate.apply(make(), state, {}) is not None, "a trial the state names but the experiment lacks"


def test_with_the_lever_off_the_resume_says_what_will_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.schedulers import HyperBandScheduler

    monkeypatch.setenv("SWEEPS_LEVERS_OFF", "scheduler_state")
    state = schedstate.snapshot(HyperBandScheduler(max_t=6))
    assert state["how"] == "none"
    why = schedstate.apply(HyperBandScheduler(max_t=6), state, {})
    said = schedstate.differs("HyperBandScheduler", why or "")
    assert "SWEEPS_LEVERS_OFF" in said and "brackets empty" in said and "not judged against" in said


def _experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "tuner.pkl").write_bytes(pickle.dumps({"tuner": 1}))
    (exp / "experiment_state-2026-01-01.json").write_text(json.dumps({"trial_data": []}))
    (exp / "callback-states-2026-01-01.pkl").write_bytes(pickle.dumps({0: {"x": 1}}))
    recovery.keep_tuner(str(exp))
    recovery.keep_state(str(exp))
    return exp


def test_damaged_state_files_come_back_from_the_kept_copies_or_are_set_aside(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    assert recovery.repair(str(exp)) == [], "nothing damaged: nothing changed"
    (exp / "tuner.pkl").write_bytes(b"\x80\x04trunc")
    (exp / "experiment_state-2026-01-01.json").write_text('{"trial_data": [')
    (exp / "callback-states-2026-01-01.pkl").write_bytes(b"\x80")
    notes = recovery.repair(str(exp))
    assert any("tuner.pkl was damaged: put back" in n for n in notes), notes
    assert any("the last good copy is back" in n and "results of the last" in n for n in notes), notes
    assert any("callback-states-2026-01-01.pkl was damaged and is set aside" in n for n in notes), notes
    assert pickle.loads((exp / "tuner.pkl").read_bytes()) == {"tuner": 1}
    assert json.loads((exp / "experiment_state-2026-01-01.json").read_text()) == {"trial_data": []}
    assert not (exp / "callback-states-2026-01-01.pkl").exists()
    assert (exp / "callback-states-2026-01-01.pkl.damaged").exists() and (exp / "tuner.pkl.damaged").exists()


def test_damaged_state_with_no_good_copy_is_refused_naming_the_file_and_the_way_out(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    (exp / "sweeps-good" / "tuner.pkl").unlink()
    (exp / "tuner.pkl").write_bytes(b"\x80")
    with pytest.raises(BadInput, match=r"tuner.pkl is damaged and no good copy was kept.*sweeps sync.*extend"):
        recovery.repair(str(exp))
