"""Real processes, real kills: Ctrl-C and SIGKILL of the driver then `resume`; `extend` with a restored
Optuna searcher; a SIGKILLed Train worker. Slow tier."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SLOW_EPOCHS, SweepsEnv, mlflow_client, trial_dirs, wait_for
from harness import Sweep

pytestmark = pytest.mark.slow

BASE = ["+experiment=quickstart", "scheduler=fifo", "sweep.max_concurrent_trials=2",
        "search_space.lr={dist: choice, values: [0.02, 0.05]}", "trainable.num_workers=1",
        "report.enabled=false", "checkpoint.num_to_keep=2"]


def _index(env: SweepsEnv) -> dict | None:
    paths = list((env.home / "sweeps").glob("[!.]*.json")) if (env.home / "sweeps").is_dir() else []
    return json.loads(paths[0].read_text()) if len(paths) == 1 else None


def _rows(trial_dir: Path) -> list[dict]:
    f = trial_dir / "result.json"
    if not f.is_file():
        return []
    rows = []
    for line in f.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line Tune is still writing
            pass
    return rows


def _trial_rows(env: SweepsEnv) -> list[list[dict]] | None:
    """Each trial's rows in the sweep's latest experiment, or None until Tune has saved its experiment state."""
    rec = _index(env)
    if not rec:
        return None
    exp = Path(rec["experiment_dirs"][-1])
    if not list(exp.glob("experiment_state-*.json")):
        return None
    return [_rows(d) for d in trial_dirs(exp)]


def _progress(env: SweepsEnv, min_rows: int) -> bool:
    return any(len(rows) >= min_rows for rows in _trial_rows(env) or [])


def _children(env: SweepsEnv, rec: dict) -> list:
    c = mlflow_client(env.tracking_uri)
    return c.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'",
                         max_results=200)


def _epochs_restart_free(trial_dir: Path) -> bool:
    epochs = [r["epoch"] for r in _rows(trial_dir) if "epoch" in r]
    return epochs.count(1) == 1 and epochs == sorted(epochs)


def _finish_and_check(env: SweepsEnv, n_trials: int, epochs: int) -> dict:
    rec = _index(env)
    proc = env.run("resume", "latest", check=True)
    assert "finished" in proc.stdout
    rec = _index(env)
    from sweeps.reports.results import load_records

    trials = load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], epochs)
    assert len(trials) == n_trials, "resume kept the trial count"
    assert all(t.status == "TERMINATED" and t.iterations == epochs for t in trials), \
        [(t.trial_id, t.status, t.iterations, t.error, [h.get("epoch") for h in t.history]) for t in trials]
    for t in trials:
        assert _epochs_restart_free(Path(t.path)), f"{t.trial_id} restarted from epoch 1"
    children = _children(env, rec)
    ids = [r.data.tags["sweeps.trial_id"] for r in children]
    assert sorted(ids) == sorted({t.trial_id for t in trials}), "one MLflow run per trial, no duplicates"
    assert {r.info.status for r in children} == {"FINISHED"}
    c = mlflow_client(env.tracking_uri)
    assert c.get_run(rec["parent_run_id"]).info.status == "FINISHED"
    running = c.search_runs([rec["mlflow_experiment_id"]], "attributes.status = 'RUNNING'")
    assert not running
    return rec


def _deleted_latest(env: SweepsEnv) -> list[str]:
    """The latest checkpoints that Tune's saved experiment state names but that are gone from storage."""
    rec = _index(env)
    if not rec or not _trial_rows(env):
        return []
    from ray.tune import ExperimentAnalysis

    try:
        trials = ExperimentAnalysis(rec["experiment_dirs"][-1]).trials
    except json.JSONDecodeError:  # a state file Tune is still writing (it rewrites it in place); any other error
        return []  # (an API that changed, a path that moved) fails the test now, not as a wait that times out
    return [t.checkpoint.path for t in trials if t.checkpoint is not None and not os.path.isdir(t.checkpoint.path)]


def _frozen_when(proc: subprocess.Popen, ready: Callable[[], object]) -> bool:
    """True, with the driver's session stopped (SIGSTOP), once ``ready()`` holds while nothing can change it.

    Seen from outside, the state Tune saved can change between a check and a kill; frozen, it cannot: the check
    is repeated on the stopped session, which is killed as it stands, or let go on to try again.
    """
    if not ready():
        return False
    os.killpg(proc.pid, signal.SIGSTOP)
    if ready():
        return True
    os.killpg(proc.pid, signal.SIGCONT)
    return False


def test_sigkill_driver_then_resume_then_extend(sweep: Sweep) -> None:
    """SIGKILL of the driver, then `resume`, then `extend` with the restored Optuna searcher. Why its own sweep: the
    kill is the subject."""
    env = sweep.env
    # Every new checkpoint ranks below the kept ones (mode=min on a rising accuracy), so Tune deletes the
    # one that was latest at each registration, while it saves its experiment state only when forced
    # (every num_to_keep checkpoints of a trial): the driver is killed while that state names a deleted
    # checkpoint, which `resume` must still continue from.
    # Epochs of 0.5 s: in-process trials otherwise end the whole sweep in ~5 s, before a poll sees the window (ci19)
    proc = env.popen("run", *BASE, "searcher=optuna", "search_space.lr={dist: loguniform, low: 0.01, high: 0.1}",
                     "sweep.num_samples=3", "trainable.params.epochs=6", "sweep.mode=min",
                     "+trainable.params.epoch_sleep_s=0.5", extra_env={"TUNE_GLOBAL_CHECKPOINT_S": "3600"})

    def killable() -> bool:
        assert proc.poll() is None, ("the sweep ended before a saved state named a deleted checkpoint",
                                     proc.communicate()[0][-3000:])
        return _frozen_when(proc, lambda: _progress(env, 2) and _deleted_latest(env))

    wait_for(killable, 480, interval=0.2,
             what="two reported epochs, and a saved state that names a checkpoint Tune deleted since")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything in its session: a power cut
    proc.wait(timeout=30)
    env.kill_ray()
    assert _deleted_latest(env), "the killed driver's saved state names a deleted checkpoint"
    rec = _index(env)
    assert rec["status"] == "running"  # nobody could say otherwise
    c = mlflow_client(env.tracking_uri)
    assert c.search_runs([rec["mlflow_experiment_id"]], "attributes.status = 'RUNNING'"), \
        "a SIGKILLed driver leaves RUNNING runs behind (until the next command closes them)"
    # sync closes them and back-fills MLflow from the Ray results; a second sync changes nothing
    first = env.run("sync", "latest", check=True)
    assert "synced:" in first.stdout
    assert not c.search_runs([rec["mlflow_experiment_id"]], "attributes.status = 'RUNNING'")
    _assert_histories_match_results(env, rec)
    second = env.run("sync", "latest", check=True)
    assert "0 run(s) created, 0 metric value(s) logged, 0 status(es) set" in second.stdout, second.stdout
    rec = _finish_and_check(env, n_trials=3, epochs=6)
    # extend: the restored Optuna study knows the 3 finished trials and suggests 1 more
    proc2 = env.run("extend", rec["sweep_id"], "--more-trials", "1", check=True)
    assert "finished" in proc2.stdout
    rec = _index(env)
    assert len(rec["experiment_dirs"]) == 2
    import pickle
    (state,) = Path(rec["experiment_dirs"][1]).glob("searcher-state-*.pkl")
    with state.open("rb") as f:
        saved = pickle.load(f)
    study = saved["_ot_study"] if isinstance(saved, dict) else saved._ot_study
    assert len(study.trials) == 4, "the extension's suggestion came from the restored study"
    children = _children(env, rec)
    assert len(children) == 4 and {r.info.status for r in children} == {"FINISHED"}


def _assert_histories_match_results(env: SweepsEnv, rec: dict) -> None:
    """After `sync`, every row of each trial's result.json is in its run's val/acc history, step for step (MLflow
    may hold a few more: the killed driver logged results that Tune had not yet synced to storage)."""
    c = mlflow_client(env.tracking_uri)
    runs = {r.data.tags["sweeps.trial_id"]: r for r in _children(env, rec)}
    exp = Path(rec["experiment_dirs"][-1])
    for d in trial_dirs(exp):
        rows = _rows(d)
        if not rows:
            continue
        run = runs[rows[0]["trial_id"]]
        logged = {m.step: m.value for m in c.get_metric_history(run.info.run_id, "val/acc")}
        expected = {r["training_iteration"]: r["val/acc"] for r in rows}
        assert {k: logged.get(k) for k in expected} == pytest.approx(expected), (rows[0]["trial_id"], logged)


def _train_worker_pids(proc: subprocess.Popen) -> list[int]:
    """The Train workers of THIS test's sweep: descendants of its driver process (raylet -> workers)."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in tree:
        try:
            if "RayTrainWorker" in " ".join(p.cmdline()):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _last_epoch(env: SweepsEnv) -> int:
    return max((r.get("epoch", 0) for rows in _trial_rows(env) or [] for r in rows), default=0)


def test_killed_train_worker_restarts_from_checkpoint(sweep: Sweep) -> None:
    """A Train worker SIGKILLed mid-trial: the trial restarts from its checkpoint. Why its own sweep: the kill is the
    subject."""
    # SLOW_EPOCHS leaves seconds to find and kill a worker mid-trial; with the quickstart's net the 10 epochs once
    # ended between two polls and there was nothing left to kill (CI, stop 14).
    epochs = 14
    env = sweep.env
    proc = env.popen("run", *BASE, "sweep.num_samples=1", "trainable.num_workers=2",
                     "search_space.lr={dist: choice, values: [0.01]}", *SLOW_EPOCHS,
                     f"trainable.params.epochs={epochs}", "failure.worker_max_failures=2")
    wait_for(lambda: _last_epoch(env) >= 1 or proc.poll() is not None, 480, what="a first reported epoch")

    def mid_trial() -> list[int]:
        return _train_worker_pids(proc) if 2 <= _last_epoch(env) <= epochs - 4 else []

    pids = wait_for(mid_trial, 120, interval=0.1,
                    what=f"Train workers mid-trial (last epoch now {_last_epoch(env)} of {epochs})")
    killed_after = _last_epoch(env)
    os.kill(pids[-1], signal.SIGKILL)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out[-4000:]
    rec = _index(env)
    (trial_dir,) = trial_dirs(rec["experiment_dirs"][0])
    rows = _rows(trial_dir)
    epochs_seen = [r["epoch"] for r in rows]
    assert epochs_seen[-1] == epochs, epochs_seen
    assert epochs_seen.count(1) == 1 and epochs_seen == sorted(epochs_seen), f"restarted from zero: {epochs_seen}"
    # the kill did restart the worker group, and it resumed from a checkpoint written at or after the kill point
    restores = [r["restored_epoch"] for r in rows if "restored_epoch" in r]
    assert restores, f"no restore after killing a Train worker at epoch {killed_after}: {epochs_seen}"
    assert restores[0] >= killed_after, (restores, killed_after)
    assert rec["counts"]["failed"] == 0
