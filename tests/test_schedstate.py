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
from sweeps.execution.run import recovery, schedstate


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


def test_a_state_that_cannot_be_put_back_is_said_in_one_line_never_raised() -> None:
    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

    asha = ASHAScheduler(time_attr="training_iteration", max_t=6)
    state = {**schedstate.snapshot(asha), "data": b"\x80\x04truncated"}
    why = schedstate.apply(ASHAScheduler(time_attr="training_iteration", max_t=6), state, {})
    assert why and "could not be put back" in why, why
    hb = schedstate.snapshot(HyperBandScheduler(max_t=6))
    why = schedstate.apply(HyperBandScheduler(max_t=6), {**hb, "data": b"garbage"}, {})
    assert why and "could not be put back" in why, why
    said = schedstate.differs("AsyncHyperBandScheduler", why)
    assert "\n" not in said and "its rungs empty" in said and "could not be put back" in said


@pytest.mark.parametrize("kind", ["asha", "hyperband"])
def test_a_scheduler_state_that_does_not_pickle_is_one_warning_and_the_sweep_goes_on(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import threading

    from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

    make = {"asha": lambda: ASHAScheduler(time_attr="training_iteration", max_t=6),  # its own save
            "hyperband": lambda: HyperBandScheduler(time_attr="training_iteration", max_t=6)}[kind]  # the lever's
    inner = make()
    inner._lock = threading.Lock()  # a patch release's new attribute that does not pickle
    state = schedstate.snapshot(inner)
    assert state["how"] == "none" and "could not be saved (TypeError" in state[schedstate.LOST], state
    saver = schedstate.callback("s-unpicklable", str(tmp_path))
    saver._inner = lambda: inner  # the sweep's scheduler, as its session holds it
    with caplog.at_level(logging.WARNING, logger=schedstate.__name__):
        assert saver.get_state()["how"] == "none" and saver.get_state()["how"] == "none"  # Tune's checkpoints
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "empty (its state could not be saved" in said[0] and "the sweep goes on" in said[0]
    why = schedstate.apply(make(), pickle.loads(pickle.dumps(state)), {})
    assert why and "could not be saved" in why and "lock" in why, "the resume names what was lost and why"


def test_extend_reads_the_newest_saved_scheduler_state_of_any_experiment_or_the_kept_one(tmp_path: Path) -> None:
    import ray.cloudpickle as cloudpickle

    state = {schedstate.MARK: True, "kind": "ASHAScheduler", "how": "own", "data": b"x"}
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "experiment_state-a.json").write_text("{}")
    (first / "callback-states-a.pkl").write_bytes(cloudpickle.dumps({0: None, 3: state}))
    assert schedstate.saved_state([str(first), str(second)]) == state, "an extension that saved none: the run before"
    (second / "experiment_state-b.json").write_text("{}")
    (second / "callback-states-b.pkl").write_bytes(cloudpickle.dumps({3: {**state, "data": b"y"}}))
    assert schedstate.saved_state([str(first), str(second)])["data"] == b"y"
    assert recovery.keep_state(str(second))
    (second / "callback-states-b.pkl").write_bytes(b"\x80")  # damaged: the copy kept with its set
    assert schedstate.saved_state([str(first), str(second)])["data"] == b"y"


def test_extend_takes_the_last_saved_state_whichever_file_holds_it(tmp_path: Path) -> None:
    """A run whose last checkpoint came after its scheduler was gone still saves the state it last had, and the
    extension reads the state saved last, not the first file by name: a resumed run's file holding none must not
    hand the added trials the rungs of a run stopped early (seen in CI: an added trial cut at rung 1)."""
    import ray.cloudpickle as cloudpickle
    from ray.tune.schedulers import ASHAScheduler

    inner = ASHAScheduler(time_attr="training_iteration", max_t=6)
    _feed(inner, [_trial(f"t{i}", 0.01) for i in range(3)])
    saver = schedstate.callback("s-gone", str(tmp_path))
    saver._inner = lambda: inner
    saved = saver.get_state()
    saver._inner = lambda: None  # the run's session ended before Tune's last checkpoint
    assert saver.get_state() is saved, "the state it last had, not none"

    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "experiment_state-2026-01-01_10-00-00.json").write_text("{}")
    early = {**saved, "saved_at": 100.0, "data": b"early"}
    late = {**saved, "saved_at": 200.0, "data": b"late"}
    (exp / "callback-states-2026-01-01_10-00-00.pkl").write_bytes(cloudpickle.dumps({8: late}))
    (exp / "callback-states-2026-01-01_11-00-00.pkl").write_bytes(cloudpickle.dumps({8: early}))
    assert schedstate.saved_state([str(exp)])["data"] == b"late"
    (exp / "callback-states-2026-01-01_12-00-00.pkl").write_bytes(cloudpickle.dumps({8: None}))
    assert schedstate.saved_state([str(exp)])["data"] == b"late"


def _experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "tuner.pkl").write_bytes(pickle.dumps({"tuner": 1}))
    (exp / "experiment_state-2026-01-01.json").write_text(json.dumps({"trial_data": []}))
    (exp / "searcher-state-2026-01-01.pkl").write_bytes(pickle.dumps({"searcher": 1}))
    (exp / "callback-states-2026-01-01.pkl").write_bytes(pickle.dumps({0: {"x": 1}}))
    recovery.keep_tuner(str(exp))
    assert recovery.keep_state(str(exp))
    return exp


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_the_state_set_is_kept_whole_in_one_atomic_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps import uris

    exp = _experiment(tmp_path)
    good = exp / recovery.GOOD
    assert sorted(p.name for p in good.iterdir()) == [recovery.SET, "tuner.pkl"] and not _left(good)
    kept = recovery.kept_set(str(exp))
    assert kept is not None and sorted(kept.files) == ["callback-states-2026-01-01.pkl",
                                                       "experiment_state-2026-01-01.json",
                                                       "searcher-state-2026-01-01.pkl"]
    before = (good / recovery.SET).read_bytes()
    (exp / "experiment_state-2026-01-01.json").write_text(json.dumps({"trial_data": [1]}))
    real = uris.write_bytes

    def cut_short(location: str, data: bytes) -> None:  # a full disk: half written, then the error
        real(location, data[: len(data) // 2])
        raise OSError("No space left on device")

    monkeypatch.setattr(uris, "write_bytes", cut_short)
    with pytest.raises(OSError):
        recovery.keep_state(str(exp))
    monkeypatch.setattr(uris, "write_bytes", real)
    assert (good / recovery.SET).read_bytes() == before, "the last good set is still whole"
    (exp / "callback-states-2026-01-01.pkl").write_bytes(b"\x80")
    assert not recovery.keep_state(str(exp)), "a set with a damaged part is not kept"


def test_a_damaged_scheduler_state_comes_back_with_its_set_and_nothing_is_lost(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    assert recovery.repair(str(exp), "s-1") == [], "nothing damaged: nothing changed"
    (exp / "tuner.pkl").write_bytes(b"\x80\x04trunc")
    (exp / "callback-states-2026-01-01.pkl").write_bytes(b"\x80")
    notes = recovery.repair(str(exp), "s-1")
    assert any("tuner.pkl was damaged: put back" in n for n in notes), notes
    assert any("callback-states-2026-01-01.pkl was damaged: put back" in n and "nothing is lost" in n
               for n in notes), notes
    assert pickle.loads((exp / "tuner.pkl").read_bytes()) == {"tuner": 1}
    assert pickle.loads((exp / "callback-states-2026-01-01.pkl").read_bytes()) == {0: {"x": 1}}
    assert (exp / "damaged-callback-states-2026-01-01.pkl").exists() and (exp / "damaged-tuner.pkl").exists()
    assert recovery.repair(str(exp), "s-1") == [], "the set-aside copies are not taken for state files"


def test_a_damaged_experiment_state_brings_the_kept_set_back_and_says_what_is_lost(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    (exp / "callback-states-2026-01-01.pkl").write_bytes(pickle.dumps({0: {"x": 2}}))  # newer than the kept set
    (exp / "experiment_state-2026-01-01.json").write_text('{"trial_data": [')
    notes = recovery.repair(str(exp), "s-1")
    assert len(notes) == 1 and "the last good copies of the experiment state and the searcher's and scheduler's " \
        "states (kept together) are back" in notes[0] and "results of the last" in notes[0], notes
    assert json.loads((exp / "experiment_state-2026-01-01.json").read_text()) == {"trial_data": []}
    assert pickle.loads((exp / "callback-states-2026-01-01.pkl").read_bytes()) == {0: {"x": 1}}, "with its set"


def test_a_damaged_scheduler_state_with_no_kept_set_is_set_aside_with_every_older_one(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    (exp / recovery.GOOD / recovery.SET).unlink()
    (exp / "callback-states-2025-12-31.pkl").write_bytes(pickle.dumps({0: {"x": 0}}))  # an earlier run's
    (exp / "callback-states-2026-01-01.pkl").write_bytes(b"\x80")
    (notes,) = [recovery.repair(str(exp), "s-1")]
    assert len(notes) == 1 and "no good copy was kept: the scheduler starts with its state empty" in notes[0], notes
    assert not list(exp.glob("callback-states-*.pkl")), "Tune would restore an earlier run's stale state"


def test_damaged_state_with_no_good_copy_names_the_sweep_and_extend_as_the_way_out(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    assert recovery.unrestorable(str(exp)) is None
    (exp / "sweeps-good" / "tuner.pkl").unlink()
    (exp / "tuner.pkl").write_bytes(b"\x80")
    assert "tuner.pkl is damaged and no good copy was kept" in (recovery.unrestorable(str(exp)) or "")
    with pytest.raises(BadInput, match=r"tuner.pkl is damaged and no good copy.*`python -m sweeps extend s-1 "
                                       r"--more-trials N` continues the search in a new experiment") as err:
        recovery.repair(str(exp), "s-1")
    assert "SWEEP_ID " not in str(err.value) and "sync" not in str(err.value)
    (tmp_path / "b").mkdir()
    exp2 = _experiment(tmp_path / "b")
    (exp2 / recovery.GOOD / recovery.SET).unlink()
    (exp2 / "experiment_state-2026-01-01.json").write_text("{")
    assert "experiment_state-2026-01-01.json is damaged and no good copy" in (recovery.unrestorable(str(exp2)) or "")
    assert recovery.set_aside(str(exp2)) == ["experiment_state-2026-01-01.json"]
    assert not list(exp2.glob("experiment_state-*")), "the reports skip an experiment they cannot read"


def test_a_resumed_run_that_never_steps_saves_the_state_it_was_to_put_back(tmp_path: Path) -> None:
    """A resume whose trials had all ended before the stop never steps (Tune's loop is finished at once), so the
    state is never put back; its closing checkpoint must save that state, newest, not the fresh scheduler's empty
    rungs (seen in CI: the extension after such a resume cut an added trial at rung 1)."""
    from ray.tune.schedulers import ASHAScheduler

    def asha() -> ASHAScheduler:
        return ASHAScheduler(time_attr="training_iteration", max_t=6, grace_period=1, reduction_factor=2)

    before = asha()
    _feed(before, [_trial(f"t{i}", 0.01) for i in range(3)])
    saved = schedstate.snapshot(before)
    fresh = asha()
    saver = schedstate.callback("s-no-step", str(tmp_path))
    saver._inner = lambda: fresh  # the resumed run's scheduler, restored empty with the Tuner
    saver.set_state(saved)  # Tune hands the callback its saved state; no step follows
    closing = saver.get_state()
    assert closing["saved_at"] >= saved["saved_at"], "the newest state the extension will read"
    back = asha()
    assert schedstate.apply(back, closing, {}) is None
    assert back.debug_string() == before.debug_string() != fresh.debug_string(), "the rungs, not empty ones"
    saver.on_step_begin(0, [])  # once the run steps, the state is put back and the live scheduler's is saved
    assert fresh.debug_string() == before.debug_string()
    assert saver.get_state()["data"] == schedstate.snapshot(fresh)["data"]
