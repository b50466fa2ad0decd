"""The control record of a running sweep, without Ray: requests, answers, the driver's liveness, the final status.

Real files in a temporary experiment folder, real processes for the liveness checks, the driver's own callback
body (:class:`sweeps.execution.run.livestatus._LiveRecord`) fed Trial-like objects; the slow tier
(tests/test_operate_slow.py) operates a real sweep from another process. Fast tier.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeps import lease, live
from sweeps.errors import BadInput
from sweeps.execution.run import control, livestatus, session
from sweeps.execution.run.progress import Progress


def _trial(trial_id: str, status: str = "RUNNING") -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, status=status, config={"lr": 0.1}, last_result={},
                           metric_analysis={})


def _request(c: control.Control, verb: str, trial_id: str | None = None, run: str | None = None) -> dict:
    return {"id": f"r-{verb}-{time.monotonic_ns()}", "verb": verb, "run": run or c.run, "trial_id": trial_id,
            "sender": {"user": "ann", "host": "box"}}


def test_every_run_draws_its_own_token_so_a_stale_request_never_applies_to_a_later_run() -> None:
    first = control.control_of(session.start("s-1").sweep_id)
    again = control.control_of(session.start("s-1").sweep_id)  # a resume in the same process (a notebook kernel)
    assert first.run != again.run and first.run.startswith("s-1@") and again.run.startswith("s-1@")
    state, why = control.apply(again, _request(again, "pause", run=first.run), [])
    assert state == "refused" and "stale" in why and again.paused is None


def test_a_stop_while_one_is_pending_and_an_unknown_trial_are_refused_and_change_nothing() -> None:
    c = control.Control(run="r")
    trials = [_trial("t1"), _trial("t2", "TERMINATED")]
    assert control.apply(c, _request(c, "trial_stop", "nope"), trials) == (
        "refused", "no unfinished trial 'nope'; unfinished: t1")
    assert control.apply(c, _request(c, "trial_stop", "t2"), trials)[0] == "refused", "a finished trial"
    assert not c.trial_stops
    assert control.apply(c, _request(c, "stop"), trials)[0] == "accepted"
    assert c.stopping and c.stopping["waiting"] == ["t1"] and c.stopping["by"] == "ann@box"
    state, why = control.apply(c, _request(c, "stop"), trials)
    assert state == "refused" and "a stop is pending" in why
    assert control.apply(c, _request(c, "pause"), trials)[0] == "refused" and c.paused is None
    assert control.apply(c, _request(c, "stop_now"), trials)[0] == "accepted" and c.stopping["now"]


def _record(tmp_path: Path, name: str = "s-2") -> livestatus._LiveRecord:
    session.start(name)
    progress = Progress("score", "max", 6, 6, str(tmp_path / "log.jsonl"))
    return livestatus._LiveRecord(name, name, str(tmp_path / name), {"CPU": 2.0}, progress, 6)


def test_a_request_is_answered_once_even_when_seen_again_or_by_a_later_run(tmp_path: Path) -> None:
    rec = _record(tmp_path)
    c = control.control_of(rec.name)
    request_id = live.submit(rec.experiment_dir, "pause", c.run)
    rec.poll([_trial("t1")])
    assert live.read_answer(rec.experiment_dir, request_id)["state"] == "applied" and c.paused
    c.paused = None
    rec.poll([_trial("t1")])
    assert c.paused is None, "handled once: not applied again"
    later = _record(tmp_path)  # a resumed run of the same sweep finds the answered request: it is not applied again
    later.poll([_trial("t1")])
    assert control.control_of(later.name).paused is None


def test_a_graceful_stop_waits_for_a_checkpoint_not_for_any_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """The live record as Tune holds it (its callback class, called through Tune's own CallbackList with the
    controller's keyword arguments): a report without a checkpoint leaves the stop waiting; a checkpoint or a
    trial's end releases it."""
    from ray.tune.callback import CallbackList

    stops: list[bool] = []
    for entry in ("stop_now", "request_stop"):  # the stop's way out of the live record, kept from this process
        monkeypatch.setattr(control, entry, lambda *_, **__: stops.append(True), raising=False)
    session.start("s-3")
    progress = Progress("score", "max", 6, 6, str(tmp_path / "log.jsonl"))
    rec = livestatus.callback("s-3", "s-3", str(tmp_path / "s-3"), {"CPU": 2.0}, progress, 6)
    tune = CallbackList([rec])
    c = control.control_of(rec.name)
    running = [_trial("t1"), _trial("t2")]
    request_id = live.submit(rec.experiment_dir, "stop", c.run)
    tune.on_step_begin(iteration=1, trials=running)
    assert live.read_answer(rec.experiment_dir, request_id)["state"] == "accepted"
    assert not stops and c.stopping["waiting"] == ["t1", "t2"], "no trial saved a checkpoint yet"
    for trial in running:  # checkpoint_every > 1: reports without a checkpoint
        tune.on_trial_result(iteration=2, trials=running, trial=trial, result={"training_iteration": 2,
                                                                                "score": 0.5})
    tune.on_step_begin(iteration=2, trials=running)
    assert not stops and c.stopping["waiting"] == ["t1", "t2"], "a report without a checkpoint does not count"
    tune.on_checkpoint(iteration=2, trials=running, trial=running[0], checkpoint=None)
    tune.on_step_begin(iteration=3, trials=running)
    assert not stops and c.stopping["waiting"] == ["t2"], "t2 still runs without a new checkpoint"
    running[1].status = "TERMINATED"
    tune.on_trial_complete(iteration=4, trials=running, trial=running[1])
    tune.on_step_begin(iteration=5, trials=running)
    assert stops == [True]
    answer = live.read_answer(rec.experiment_dir, request_id)
    assert answer["state"] == "applied" and answer["accepted_at"] <= answer["applied_at"], answer
    assert "accepted_why" in answer and "applied_why" in answer, "the accepted answer is kept beside the applied one"


def test_the_final_status_of_a_stopped_sweep_holds_nothing_and_says_who_stopped_it(tmp_path: Path) -> None:
    rec = _record(tmp_path, "s-4")
    c = control.control_of(rec.name)
    c.paused = {"by": "ann@box", "since": 1.0}
    c.stopping = {"by": "bob@box", "since": 2.0, "now": False, "waiting": [], "applied": 3.0}
    rec.write([_trial("t1")])
    assert live.read_status(rec.experiment_dir)["held"]["CPU"] == 2.0
    livestatus.final(rec.experiment_dir, "interrupted", {"completed": 2, "unfinished": 1}, None)
    s = live.read_status(rec.experiment_dir)
    assert s["state"] == "interrupted" and s["held"] == {} and s["left"] == "" and s["paused"] is None
    assert s["stopping"] is None and s["stopped"] == {"by": "bob@box", "at": 3.0, "now": False}
    assert s["trials"]["running"] == 0 and s["trials"]["done"] == 2 and s["driver"]["lease_expires"] is None


def test_a_pause_with_nothing_running_is_left_out_of_the_time_budget() -> None:
    c = control.Control(run="r")
    c.note_idle(100.0, running=False)  # not paused: nothing counts
    c.paused = {"by": "ann@box", "since": 100.0}
    c.note_idle(110.0, running=True)  # paused, a trial still runs: the time counts
    c.note_idle(120.0, running=False)
    c.note_idle(150.0, running=False)
    assert c.idle(160.0) == 40.0, "paused with nothing running from 120 to 160"
    c.paused = None
    c.note_idle(170.0, running=False)
    assert c.idle(500.0) == 50.0


def test_the_drivers_steps_count_a_pause_with_nothing_running(tmp_path: Path) -> None:
    rec = _record(tmp_path, "s-6")
    c = control.control_of(rec.name)
    c.paused = {"by": "ann@box", "since": time.time()}
    rec.on_step_begin(1, [_trial("t1")])  # a trial still runs: the time counts
    time.sleep(0.2)
    rec.on_step_begin(2, [_trial("t1", "TERMINATED")])
    time.sleep(0.3)
    rec.tick()  # Tune's loop held by the pause: the search algorithm's hold ticks the record
    assert 0.25 <= c.idle() < 1.0, c.idle()


def _status(pid: int, proc: str, expires: float) -> dict:
    return {"state": "running", "driver": {"host": lease.host(), "pid": pid, "token": "x" * 32, "proc": proc,
                                           "lease_expires": expires}}


def test_a_killed_driver_on_this_host_is_seen_gone_at_once_before_its_lease_expires() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = lease.proc_of(child.pid)
    if not proc:
        pytest.skip("no /proc here: only the lease can tell")
    soon = time.time() + 60
    assert live.driver_alive(_status(child.pid, proc, soon))
    child.kill()
    child.wait()
    assert not live.driver_alive(_status(child.pid, proc, soon)), "its pid is gone: no need to wait for the lease"
    assert live.driver_alive({**_status(child.pid, "", soon)}), "another host's driver: its lease decides"
    assert not live.driver_alive(_status(child.pid, "", time.time() - 1))


def test_a_request_to_a_dead_driver_says_so_at_once_with_resume_and_sync(tmp_path: Path) -> None:
    from sweeps.ops import operate

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = lease.proc_of(child.pid) or ""
    child.wait()
    exp = tmp_path / "s-5"
    live.write_status(str(exp), {**_status(child.pid, proc, time.time() + 60), "sweep_id": "s-5", "run": "r"})
    if not proc:
        pytest.skip("no /proc here: only the lease can tell")
    t0 = time.monotonic()
    with pytest.raises(BadInput, match=r"^SWEEP: sweep s-5 is not running.*resume s-5.*sync s-5"):
        operate.send(str(exp), "pause")
    assert time.monotonic() - t0 < 2 and not (exp / live.FOLDER / "requests").exists(), "nothing sent"


def test_an_unknown_sweep_is_named_as_the_commands_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.ops import operate

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    with pytest.raises(BadInput, match=r"^SWEEP: no sweep 'nosuch'"):
        operate.status("nosuch")


def test_list_says_paused_while_an_operators_pause_holds_the_sweep() -> None:
    from sweeps import store
    from sweeps.ops.heartbeat import driver_fields

    rec = store.SweepRecord(sweep_id="s", experiment="e", created=0.0, status="running", storage_path="/x",
                            experiment_dirs=["/x/s"], tracking_uri="", **driver_fields())
    rec.driver_token = "another process"  # not this one: its pid (ours) lives, its lease holds
    assert rec.state_word() == "running (live)"
    rec.live_state = "paused"
    assert rec.state_word() == "paused (live)"
    rec.lease_expires = time.time() - 1
    assert rec.state_word() == "running", "a dead driver's sweep is not live, paused or not"
    json.dumps(rec.__dict__)
