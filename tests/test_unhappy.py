"""The unhappy paths that need no running sweep: refusals before Ray starts, leases, exit codes, bootstrap.

Each test names a promise; the real-sweep halves are in tests/test_unhappy_slow.py (SIGTERM's, and the refusals
while a driver is live, in tests/test_resume_decisions_slow.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, dead_holder, mlflow_client

from sweeps import lease, store
from sweeps.cli.main import main
from sweeps.errors import BadInput


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.parametrize(("override", "says"), [
    ("trainable.loop=trainables.digits.train_lop", "did you mean trainables.digits.train_loop"),
    ("trainable.loop=trainables.nowhere.train_loop", "cannot import module 'trainables.nowhere'"),
    ("trainable.builder=trainables.common.RESUME_KEY", "is a str, not a function"),
    ("trainable.loop=trainables.common.save_checkpoint", "it is called as loop(config)"),
    ("trainable.builder=trainables.common.accumulation_steps", None),  # takes (config): accepted
    ("trainable.load_model=trainables.digits.build_model", "it is called as load_model(checkpoint_dir, config)"),
    ("trainable.load_model=trainables.digits.lod_model", "did you mean trainables.digits.load_model"),
    ("trainable.load_model=trainables.wine_state.load_model", None),
])
def test_dotted_paths_are_imported_and_checked_before_ray_starts(sweeps_env: Any, capsys: pytest.CaptureFixture,
                                                               override: str, says: str | None) -> None:
    rc = main(["run", "+experiment=quickstart", override, "--dry-run"])
    err = capsys.readouterr().err
    if says is None:
        assert rc == 0, err
        return
    assert rc == 2 and says in err and override.split("=")[0] in err, err
    assert not _files(sweeps_env.home), "a refused sweep writes nothing"
    assert not _files(sweeps_env.ray_tmp), "Ray was never started"


def test_a_trial_the_machine_cannot_hold_is_refused_naming_the_keys(sweeps_env: Any,
                                                                    capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "+experiment=quickstart", "trainable.num_workers=64", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "trainable.num_workers" in err and "cluster.num_cpus" in err and "65 CPUs" in err, err
    assert not _files(sweeps_env.home) and not _files(sweeps_env.ray_tmp)
    assert main(["run", "+experiment=quickstart", "trainable.num_workers=64", "cluster.num_cpus=70",
                 "--dry-run"]) == 0, "cluster.num_cpus overrides the bound"


def test_outcome_exit_codes() -> None:
    from sweeps.ops.run import Outcome
    from sweeps.reports.summary import collect

    rec = store.SweepRecord("s", "e", 0.0, "finished", "/x", ["/x/s"], "sqlite:///x")
    empty = collect([], "val/acc", "max")
    assert Outcome(rec, empty).exit_code == 1, "no trial succeeded: exit 1"
    assert Outcome(rec, empty, interrupted=True).exit_code == 130
    from sweeps.reports.results import TrialRecord

    ok = collect([TrialRecord("t", "TERMINATED", {}, [{"val/acc": 0.9, "training_iteration": 1.0}])],
                 "val/acc", "max")
    assert Outcome(rec, ok).exit_code == 0
    assert Outcome(rec, ok, promotion_refused=True).exit_code == 3


def _record(sweeps_env: Any, **fields: Any) -> store.SweepRecord:
    from sweeps.ops.prepare import prepare
    from sweeps.ops.run import new_record

    overrides = ["+experiment=quickstart"]
    spec = prepare(overrides)
    rec = new_record(spec, "quickstart-20260101-000000-abcd", overrides, "0", "", 2, None, None)
    rec.driver_token, rec.driver_proc = "e" * 32, ""  # another process's record, pid space unknown
    for k, v in fields.items():
        setattr(rec, k, v)
    store.save(rec)
    return rec


@pytest.mark.parametrize("command", ["resume", "extend", "sync"])
def test_a_sweep_whose_driver_holds_a_live_lease_elsewhere_is_refused(sweeps_env: Any, command: str) -> None:
    rec = _record(sweeps_env, status="running", driver_host="another-host", driver_pid=4242,
                  lease_expires=time.time() + 60)
    from sweeps.ops import resume, sync

    call = {"resume": lambda: resume.resume(rec.sweep_id), "sync": lambda: sync.sync(rec.sweep_id),
            "extend": lambda: resume.extend(rec.sweep_id, 1)}[command]
    with pytest.raises(BadInput, match="still running .*another-host"):
        call()


def test_a_driver_with_our_hostname_and_pid_in_another_namespace_is_not_us(sweeps_env: Any) -> None:
    """Two containers named alike, pids alike: the record's token and pid namespace tell them apart."""
    from sweeps.ops import resume

    rec = _record(sweeps_env, status="running", driver_host=lease.host(), driver_pid=os.getpid(),
                  driver_token="f" * 32, driver_proc="00000000-0000-0000-0000-000000000000/4026532999/1",
                  lease_expires=time.time() + 60)
    with pytest.raises(BadInput, match=f"still running .*driver pid {os.getpid()}"):
        resume.resume(rec.sweep_id)


def test_an_expired_lease_or_a_dead_local_pid_frees_the_sweep(sweeps_env: Any) -> None:
    from sweeps.ops import resume

    gone = dead_holder()  # a driver of this pid namespace whose process has exited: free before its lease ends
    for fields in ({"driver_host": "another-host", "driver_pid": 4242, "lease_expires": time.time() - 1},
                   {"driver_host": gone.host, "driver_pid": gone.pid, "driver_token": gone.token,
                    "driver_proc": gone.proc, "lease_expires": time.time() + 60}):
        rec = _record(sweeps_env, status="running", **fields)
        assert not rec.owner_alive()
        with pytest.raises(BadInput, match="no resumable Tune state"):  # past the lease check
            resume.resume(rec.sweep_id)


def test_resume_refuses_a_finished_sweep_and_points_to_extend(sweeps_env: Any) -> None:
    from sweeps.ops import resume

    rec = _record(sweeps_env, status="finished")
    with pytest.raises(BadInput, match="already finished.*extend"):
        resume.resume(rec.sweep_id)


def test_the_best_tag_moves_to_the_new_best_run(sweeps_env: Any) -> None:
    from sweeps.tracking import client as mc
    from sweeps.tracking.parent import mark_best

    c = mc.client(sweeps_env.tracking_uri)
    exp = mc.get_or_create_experiment(c, "best-tag", sweeps_env.tracking_uri)
    parent = c.create_run(exp, tags={mc.RUN_TAG_SWEEP: "s"}).info.run_id
    a, b = (c.create_run(exp, tags={mc.PARENT_TAG: parent}).info.run_id for _ in range(2))
    rec = store.SweepRecord("s", "best-tag", 0.0, "finished", "/x", ["/x/s"], sweeps_env.tracking_uri,
                            mlflow_experiment_id=exp, parent_run_id=parent)
    mark_best(c, rec, a)
    mark_best(c, rec, b)  # a resumed or extended sweep found a better trial
    tagged = mlflow_client(sweeps_env.tracking_uri).search_runs([exp], "tags.`sweeps.best` = 'true'")
    assert [r.info.run_id for r in tagged] == [b]


def test_signals_while_closing_the_record_are_noted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    from sweeps.ops.signals import shielded

    done = False
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN under a background job (`cmd &`)
    with shielded("closing the record"):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        done = True
    assert done and "SIGTERM received while closing the record" in caplog.text
    assert signal.getsignal(signal.SIGINT) is before, "the handlers come back"


STOP_PROBE = """
import os, signal, sys, threading, time
import ray
from sweeps.execution.cluster import raystart
from sweeps.ops.launch import stop_ray_while
ray.init(num_cpus=1, include_dashboard=False)

def main_stops_ray():  # the main thread's stack is inside raystart.stop
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None and frame.f_code is not raystart.stop.__code__:
        frame = frame.f_back
    return frame is not None

def report():  # drawn while Ray stops: a second Ctrl-C comes meanwhile
    while not main_stops_ray() and ray.is_initialized():
        time.sleep(0.001)
    print("ctrl-c while ray stops:", ray.is_initialized(), flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    return "drawn"

print("report:", stop_ray_while(report))
print("ray stopped:", not ray.is_initialized())
"""


def test_a_second_ctrl_c_while_ray_stops_lets_the_shutdown_finish(sweeps_env: Any) -> None:
    """Real Ray: a signal while Ray stops (the report drawn meanwhile) is noted, not raised (cut, the
    interpreter's exit raced Ray's shutdown and Ray's core worker ended an interrupted sweep with status 1)."""
    proc = subprocess.run([sys.executable, "-c", STOP_PROBE], env=sweeps_env.env,
                          capture_output=True, text=True, timeout=100)
    assert "ctrl-c while ray stops: True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert proc.returncode == 0 and "report: drawn" in proc.stdout and "ray stopped: True" in proc.stdout, \
        proc.stdout + proc.stderr[-2000:]
    assert "SIGINT received while stopping Ray" in proc.stderr


RELEASE_PROBE = """
import gc, threading, weakref
import ray
from sweeps.execution.cluster import raystart
from sweeps.ops.launch import stop_ray_while
ray.init(num_cpus=1, include_dashboard=False)
stopped_on = []
stop = raystart.stop
raystart.stop = lambda: (stopped_on.append(threading.current_thread() is threading.main_thread()), stop())[1]

class Held:  # Tune's objects as a sweep's frames leave them: Ray references in a cycle only the collector frees
    pass
held = Held()
held.me, held.refs = held, [ray.put(i) for i in range(100)]
gone = weakref.ref(held)
del held

def report():  # drawn on a helper thread while Ray stops: nothing of Ray may be released here
    return gone() is None, gc.isenabled()

print("the cycle was freed before Ray stopped, the collector paused:", stop_ray_while(report))
print("ray stopped on the main thread:", stopped_on, not ray.is_initialized(), "collector back:", gc.isenabled())
ray.init(num_cpus=1, include_dashboard=False)  # the next sweep in the same process (a notebook, a resume)
print("after a restart:", ray.get(ray.put(41)) + 1, flush=True)
ray.shutdown()
"""


def test_ray_stops_on_the_thread_that_holds_its_objects_with_no_reference_released_meanwhile(
        sweeps_env: Any) -> None:
    """Real Ray: Ray's core worker ends the whole process when a Ray reference is released while it shuts
    down, and a notebook kernel died of it (Ray stopped on a helper thread while the sweep's frames let go of
    Tune's objects). Ray now stops on the main thread, after a collection, with the collector paused while the
    report is drawn; a next sweep in the same process gets a Ray of its own."""
    proc = subprocess.run([sys.executable, "-c", RELEASE_PROBE], env=sweeps_env.env, capture_output=True,
                          text=True, timeout=110)
    said = proc.stdout + proc.stderr[-3000:]
    assert "the cycle was freed before Ray stopped, the collector paused: (True, False)" in proc.stdout, said
    assert "ray stopped on the main thread: [True] True collector back: True" in proc.stdout, said
    assert proc.returncode == 0 and "after a restart: 42" in proc.stdout, said


def _fake_project(tmp_path: Path, failing: str) -> Path:
    """A copy of scripts/ whose .venv's python fails on ``pip install <failing>``."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "scripts", root / "scripts")
    fake_bin = root / ".venv" / "bin"
    fake_bin.mkdir(parents=True)
    (fake_bin / "python").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *"install"*"{failing}"*) echo "ERROR: No matching distribution found for {failing}" >&2;'
        " exit 1;; esac\nexit 0\n")
    (fake_bin / "python").chmod(0o755)
    (fake_bin / "activate").write_text(f'PATH="{fake_bin}:$PATH"\n')
    return root


@pytest.mark.parametrize("failing", ["torch==2.13.0", "-e"])
def test_bootstrap_fails_loudly_when_an_install_fails(tmp_path: Path, failing: str) -> None:
    root = _fake_project(tmp_path, failing)
    proc = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "failed" in proc.stderr and "No matching distribution" in proc.stderr, proc.stderr


def test_an_optuna_study_database_is_a_sqlite_url_and_nothing_else(sweeps_env: Any, tmp_path: Path) -> None:
    """The nightly keeps its Optuna study in SQLite through ``searcher.storage`` (a URL, not a ``_target_``:
    ``optuna.storages`` stays off the allowlist); anything else is refused before launch, naming the key."""
    from sweeps.ops import prepare

    spec = prepare.prepare(["+experiment=digits_optuna", f"++searcher.storage=sqlite:///{tmp_path}/study.db"])
    assert spec.searcher["storage"].startswith("sqlite:///")
    for bad in ("postgresql://db/x", "{_target_: optuna.storages.RDBStorage, url: 'sqlite:///x.db'}"):
        with pytest.raises(BadInput, match=r"searcher.storage"):
            prepare.prepare(["+experiment=digits_optuna", f"++searcher.storage={bad}"])
