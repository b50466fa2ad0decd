"""The running sweep's owner, fast: its stop switch on and off (the ``tune_interrupt`` lever and its Stopper
fallback), the live record's guarded writes and heartbeat, the model uploads' queue, and the ``tune_files`` and
``job_entrypoint`` levers with their fallbacks. The real sweeps are in tests/test_run_owner_slow.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sweeps.execution.levers import core, job_entrypoint, tune_files, tune_interrupt


@pytest.fixture
def levers_on(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv(core.OFF, raising=False)
    monkeypatch.delenv(core.TEST_RAY_VERSION, raising=False)
    core.forget()
    yield monkeypatch
    core.forget()


def _off(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(core.OFF, name)
    core.forget()


def test_a_stop_sets_tunes_own_interrupted_event_from_any_thread(levers_on: Any) -> None:
    """Tune's loop watches the event its ``_setup_signal_catching`` made: the run's stop sets that very event,
    from a thread that is not the main one, and a stop asked before Tune's loop began holds once it does."""
    import ray.tune.tune as tune_module

    from sweeps.execution.run import control, session

    live = session.start("s-int")
    made: list[threading.Event] = []

    def tunes_loop() -> None:  # what Tuner.fit runs on its thread: Tune makes its event inside the wrapper
        with control.fitting("s-int"):
            made.append(tune_module._setup_signal_catching())

    t = threading.Thread(target=tunes_loop)
    t.start()
    t.join()
    assert made and not made[0].is_set()
    control.request_stop("s-int", "a test")
    assert made[0].is_set() and not live.stop_all, "Tune's own event, not the Stopper's fallback"

    early = session.start("s-early")
    control.request_stop("s-early", "before the loop")
    with control.fitting("s-early"):
        assert tune_module._setup_signal_catching().is_set(), "a stop asked before Tune's loop holds"
    assert early.interrupt.asked
    session.end("s-int")
    session.end("s-early")


def test_with_the_lever_off_a_stop_goes_through_the_sweeps_stopper(levers_on: Any) -> None:
    from sweeps.execution.run import control, session
    from sweeps.execution.run.budget import sweep_stopper

    _off(levers_on, "tune_interrupt")
    live = session.start("s-off")
    stopper = sweep_stopper("s-off", type("Inner", (), {"stop_all": lambda self: False,
                                                        "__call__": lambda self, t, r: False})())
    assert not stopper.stop_all()
    assert control.interrupt("s-off") is False and not live.interrupt.asked, "nothing done where it cannot"
    control.request_stop("s-off", "a test")
    assert live.stop_all and stopper.stop_all(), "Tune's public path: the Stopper ends every trial"
    session.end("s-off")


def test_the_lever_holds_on_the_installed_ray_and_its_probe_fails_when_tune_moves(levers_on: Any) -> None:
    import ray.tune.tune as tune_module

    if not core.installed("ray").startswith(tune_interrupt.LEVER.checked):
        pytest.skip("the lever is off on this Ray anyway")
    assert core.why_not(tune_interrupt.LEVER) is None
    original = tune_module._setup_signal_catching
    levers_on.setattr(tune_module, "_setup_signal_catching", lambda: None)
    assert "not an Event" in (core.why_not(tune_interrupt.LEVER) or "")
    levers_on.setattr(tune_module, "_setup_signal_catching", original)


class _Storage:
    """The live folder refusing writes while ``down`` (a storage blip), as ``sweeps.live``'s writers see it."""

    def __init__(self) -> None:
        self.down = False
        self.status: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {}


def test_a_refused_write_of_the_live_record_is_retried_never_fatal(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from sweeps import live
    from sweeps.execution.run import livestatus

    disk = _Storage()

    def write_status(where: str, status: dict[str, Any]) -> None:
        if disk.down:
            raise OSError(28, "No space left on device")
        disk.status.append(dict(status, driver=dict(status["driver"])))

    def answer(where: str, request_id: str, state: str, why: str = "") -> None:
        if disk.down:
            raise OSError(28, "No space left on device")
        disk.answers[request_id] = state

    monkeypatch.setattr(live, "write_status", write_status)
    monkeypatch.setattr(live, "answer", answer)
    record = livestatus._LiveRecord("s-blip", "s-blip", "/nowhere", {"CPU": 1.0},
                                    type("P", (), {"best": None, "epochs": 2, "metric": "m", "mode": "max",
                                                   "start": time.time(), "left_text": lambda self: ""})(), 2)
    disk.down = True
    record.write([])
    record.answer("r1", "applied", "paused")
    assert not disk.status and not disk.answers and record.unwritten and "r1" in record.unanswered
    assert any("could not write" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    first_lease = record.last["driver"]["lease_expires"]  # type: ignore[index]
    time.sleep(0.01)
    disk.down = False
    record.beat()  # the heartbeat: no Tune step needed
    assert disk.answers == {"r1": "applied"} and not record.unanswered
    assert disk.status and disk.status[-1]["driver"]["lease_expires"] > first_lease, "the lease renewed"


def test_model_uploads_leave_the_loop_and_a_drain_cut_short_ends_every_run() -> None:
    from sweeps.tracking.uploads import Ending, Uploads

    ended: list[str] = []
    gate = threading.Event()
    uploads = Uploads(limit=2)
    uploads.submit(Ending("fast", lambda: ended.append("fast"), lambda: ended.append("fast-cut")))
    assert uploads.wait(5) and ended == ["fast"]
    t0 = time.monotonic()
    uploads.submit(Ending("slow", lambda: (gate.wait(30), ended.append("slow")), lambda: ended.append("slow-cut")))
    assert time.monotonic() - t0 < 1, "submit returns at once: the upload runs on the uploads' thread"
    assert not uploads.wait(0.5)
    assert uploads.cut_short() == 1 and ended[-1] == "slow-cut", "its run ends without the model, said"
    gate.set()


def test_tune_files_names_are_tunes_and_with_the_lever_off_no_copy_is_kept(levers_on: Any, tmp_path: Path) -> None:
    from sweeps.execution.run import recovery

    if not core.installed("ray").startswith(tune_files.LEVER.checked):
        pytest.skip("the lever is off on this Ray anyway")
    assert core.why_not(tune_files.LEVER) is None
    from ray.tune.impl import tuner_internal

    levers_on.setattr(tuner_internal, "_TUNER_PKL", "tuner-v2.pkl")
    assert "tuner-v2.pkl" in (core.why_not(tune_files.LEVER) or "")
    levers_on.undo()
    from ray.tune.callback import CallbackList

    levers_on.setattr(CallbackList, "get_state", lambda self: [c.get_state() for c in self._callbacks])
    assert "not one state per callback" in (core.why_not(tune_files.LEVER) or "")
    levers_on.undo()
    (tmp_path / tune_files.TUNER).write_bytes(b"a tuner")
    levers_on.delenv(core.OFF, raising=False)
    core.forget()
    recovery.keep_tuner(str(tmp_path))
    assert (Path(recovery.good_dir(str(tmp_path))) / tune_files.TUNER).is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / tune_files.TUNER).write_bytes(b"a tuner")
    _off(levers_on, "tune_files")
    recovery.keep_tuner(str(other))
    assert not (Path(recovery.good_dir(str(other))) / tune_files.TUNER).exists()
    assert recovery.repair(str(other), "s") == [] and recovery.keep_state(str(other)) is False


def test_a_ray_jobs_entrypoint_is_told_apart_and_with_the_lever_off_it_is_not(levers_on: Any) -> None:
    from sweeps.execution.run import livestatus

    levers_on.delenv(livestatus.LAUNCHED, raising=False)
    levers_on.setenv(job_entrypoint.NAME, "{}")
    if core.installed("ray").startswith(job_entrypoint.LEVER.checked):
        assert livestatus.launched_by() == "ray job"
    _off(levers_on, "job_entrypoint")
    assert livestatus.launched_by() == "cli"


def test_a_graceful_stop_asked_in_process_waits_for_the_running_trials_checkpoints() -> None:
    """``Run.request_stop(now=False)`` (an API caller's ``stop``): no trial starts, and the stop waits for the
    trials running now, as ``sweeps stop`` does; a second ask changes nothing."""
    from types import SimpleNamespace

    from sweeps.execution.run import control, session
    from sweeps.execution.run.owner import Run

    live = session.start("s-grace")
    live.callbacks["live"] = SimpleNamespace(trials=[SimpleNamespace(trial_id="a", status="RUNNING"),
                                                     SimpleNamespace(trial_id="b", status="PENDING")])
    run = Run(spec=None, sweep_id="s", name="s-grace", tuner=None)  # type: ignore[arg-type]
    run.request_stop(now=False, why="the host")
    c = control.control_of("s-grace")
    assert c.stopping and c.stopping["waiting"] == ["a"] and not c.stopping["now"] and not c.may_start()
    run.request_stop(now=False, why="again")
    assert c.stopping["by"] == "the host" and not live.interrupt.asked, "nothing stops before the checkpoints"
    session.end("s-grace")


def test_an_operator_naming_a_sweep_by_its_folder_reads_its_status_patiently(tmp_path: Path) -> None:
    """A status file that is being replaced (an object store may answer "no such key" meanwhile) is asked for
    again before `sweeps stop URI` says the folder holds no sweep; an unnamed read is not held up."""
    from sweeps import live
    from sweeps.ops import operate

    exp = tmp_path / "exp"
    later = threading.Timer(0.4, live.write_status, (str(exp), {"sweep_id": "s1", "state": "running"}))
    later.start()
    assert live.read_status(str(exp)) is None, "not patient: at once"
    assert operate.locate(str(exp)) == ("s1", str(exp)), "patient: the file that came 0.4 s later"
    later.join()


def test_a_stop_while_tunes_loop_runs_waits_for_the_checkpoints_in_flight() -> None:
    """A trial whose result Tune took saves its checkpoint in a second round trip: the stop sets Tune's event at
    the end of a step with no trial saving (else the resumed trial trains that epoch again and its result is
    logged twice: seen in CI), at most ``settle_s`` later; before Tune's loop has stepped, at once."""
    from types import SimpleNamespace

    from sweeps.execution.levers.tune_interrupt import Interrupt

    saving, idle = SimpleNamespace(is_saving=True), SimpleNamespace(is_saving=False)
    stop, event = Interrupt(), threading.Event()
    stop.adopt(event)
    stop.step_ended([idle])  # Tune's loop runs
    stop.set(settle_s=30)
    assert not event.is_set()
    stop.step_ended([saving, idle])
    assert not event.is_set(), "a checkpoint is in flight"
    stop.step_ended([idle, idle])
    assert event.is_set()

    late, late_event = Interrupt(), threading.Event()
    late.adopt(late_event)
    late.step_ended([saving])
    late.set(settle_s=0.2)
    late.step_ended([saving])
    assert late_event.wait(5), "a checkpoint that never lands holds the stop settle_s at most"

    early, early_event = Interrupt(), threading.Event()
    early.adopt(early_event)
    early.set(settle_s=30)
    assert early_event.is_set(), "no step yet: at once"
