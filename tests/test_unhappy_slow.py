"""The unhappy paths of real sweeps: exit codes, runs never left RUNNING, SIGTERM, leases, budgets, grids.

Real Ray, real MLflow (SQLite), real training on digits; every sweep is as small as the promise allows. SIGTERM
then Ctrl-C, sync/resume/extend refused while a sweep is live, the way out of an unrestorable ``tuner.pkl`` and an
extension stopped before it started: on the ASHA sweep of tests/test_resume_decisions_slow.py.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import FAST, SweepsEnv, mlflow_client, trial_dirs, wait_for
from harness import Sweep

pytestmark = pytest.mark.slow

TINY = ["+experiment=quickstart", "scheduler=fifo", "trainable.num_workers=1", "report.enabled=false",
        "search_space.lr={dist: choice, values: [0.05]}", *FAST]


def _index(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def _runs(env: SweepsEnv, rec: dict, status: str | None = None) -> list:
    c = mlflow_client(env.tracking_uri)
    where = f"tags.`sweeps.sweep_id` = '{rec['sweep_id']}'"
    if status:
        where += f" and attributes.status = '{status}'"
    return c.search_runs([rec["mlflow_experiment_id"]], where, max_results=500)


def _rows(trial_dir: Path) -> list[dict]:
    f = trial_dir / "result.json"
    out = []
    for line in f.read_text().splitlines() if f.is_file() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _trial_dirs(rec: dict) -> list[Path]:
    return [d for exp in rec["experiment_dirs"] for d in trial_dirs(exp)]


def test_no_trial_succeeds_exits_1_then_retry_errored_finishes(sweep: Sweep) -> None:
    """Every trial fails once (exit 1, every run FAILED), then ``resume --retry-errored`` finishes them from their
    checkpoints. Why its own sweep: no trial of it may succeed."""
    env = sweep.env
    proc = env.run("run", *TINY, "sweep.num_samples=2", "sweep.max_concurrent_trials=2", "failure.max_failures=0",
                   "failure.worker_max_failures=0", "+trainable.params.fault=raise_once",
                   "+trainable.params.fault_epoch=2")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "2 of 2 trials failed" in out and "injected one-off fault at epoch 2" in out, out
    traceback_file = out.split("full traceback: ", 1)[1].split()[0]
    assert "injected one-off fault" in Path(traceback_file).read_text()
    assert "no trial succeeded" in out
    rec = _index(env)
    assert rec["status"] == "failed"
    assert {r.info.status for r in _runs(env, rec)} == {"FAILED"}, "parent and children all FAILED"
    proc = env.run("resume", "latest", "--retry-errored")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = _index(env)
    assert rec["status"] == "finished" and rec["counts"]["completed"] == 2
    for d in _trial_dirs(rec):
        epochs = [r["epoch"] for r in _rows(d)]
        assert epochs == [1, 2, 3], f"retried from the checkpoint of epoch 1, not from scratch: {epochs}"
    assert {r.info.status for r in _runs(env, rec)} == {"FINISHED"}


def test_a_searcher_that_cannot_be_built_leaves_no_run_running(sweep: Sweep, tmp_path: Path) -> None:
    env = sweep.env
    # a valid setting (a sqlite URL) whose database cannot be opened: found only when the searcher is built
    proc = env.run("run", *TINY, "searcher=optuna", f"++searcher.storage=sqlite:///{tmp_path}/no/such/folder/study.db")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = _index(env)
    assert rec["status"] == "failed"
    runs = _runs(env, rec)
    assert runs and {r.info.status for r in runs} == {"FAILED"}, [(r.info.run_name, r.info.status) for r in runs]


def _windows(rec: dict) -> list[tuple[float, float]]:
    """Each trial's [start, end] from its own rows: the first row's timestamp minus its iteration time."""
    out = []
    for d in _trial_dirs(rec):
        rows = _rows(d)
        if rows:
            out.append((rows[0]["timestamp"] - rows[0]["time_this_iter_s"], rows[-1]["timestamp"]))
    return out


def test_time_budget_with_unbounded_trials_stops_and_concurrency_holds_across_a_resume(sweep: Sweep) -> None:
    """The time budget is the sweep's: stopped (SIGTERM) after it counted some seconds, the resumed run gets what
    is left of it, not the whole budget again; one trial at a time throughout.
    Why its own sweep: no other sweep has a time budget, and it is stopped to be resumed."""
    env = sweep.env
    # One-epoch trials in the trial's own process (reused: a second or two each) and 50 s: many trials, and the
    # stop lands 12 s after the first trial reported, with more than half of the budget left.
    budget = 50
    proc = env.popen("run", *TINY, "sweep.num_samples=-1", f"sweep.time_budget_s={budget}",
                     "sweep.max_concurrent_trials=1", "trainable.params.epochs=1")
    wait_for(lambda: proc.poll() is not None or (_index_rec(env) and
             any(_rows(d) for d in _trial_dirs(_index_rec(env)))), 300, 0.5, "a first trial's report")
    reported = time.monotonic()
    wait_for(lambda: proc.poll() is not None or time.monotonic() - reported > 12, 60, 0.5, "12 s of the budget")
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, out[-3000:]
    before = _index(env)
    counted = before["running_s"]
    assert 10 <= counted < budget - 10, before
    proc = env.run("resume", "latest", timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stopped by sweep.time_budget_s" in proc.stdout
    rec = _index(env)
    assert rec["status"] == "finished" and rec["stop_reason"] == "time_budget"
    resumed_s = rec["wall_s"] - before["wall_s"]
    assert resumed_s < budget - counted + 20, ("the resumed run had what was left of the budget, not all of it",
                                               resumed_s, counted)
    assert budget <= rec["running_s"] < budget + 20, rec["running_s"]
    parent = mlflow_client(env.tracking_uri).get_run(rec["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["stop_reason"] == "time_budget"
    windows = sorted(_windows(rec))
    assert len(windows) >= 2, "the budget allowed more than one trial"
    assert rec["counts"]["total"] == len(windows), "trials that never started are not counted"
    overlaps = [(a, b) for a, b in zip(windows, windows[1:], strict=False) if b[0] < a[1] - 0.5]
    assert not overlaps, f"max_concurrent_trials=1 but trials overlapped: {overlaps}"


def _index_rec(env: SweepsEnv) -> dict | None:
    found = list((env.home / "sweeps").glob("[!.]*.json")) if (env.home / "sweeps").is_dir() else []
    return json.loads(found[0].read_text()) if len(found) == 1 else None


def test_a_grid_runs_exactly_the_grid_times_the_repeats_and_promote_takes_the_checkpoint_tune_ranked_best(
        sweep: Sweep) -> None:
    """One `+experiment=digits_grid` sweep for two promises: a grid runs each point exactly `num_samples` times,
    and with `sweep.metric=val/loss sweep.mode=min` `promote` registers the checkpoint Tune ranked best by the
    loss (a noisy lr: the best kept checkpoint is not the last)."""
    env = sweep.env
    proc = env.run("run", "+experiment=digits_grid", "trainable.num_workers=1", "report.enabled=false", *FAST,
                   "search_space.lr={dist: grid, values: [0.02, 0.3]}",
                   "search_space.hidden_size={dist: grid, values: [32]}", "sweep.num_samples=2",
                   "sweep.max_concurrent_trials=2", "sweep.metric=val/loss", "sweep.mode=min",
                   "trainable.params.epochs=4",
                   "checkpoint.num_to_keep=2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from sweeps.reports.results import load_records
    rec = _index(env)
    assert rec["experiment"] == "digits_grid" and rec["searcher"] == "grid"
    trials = load_records(rec["experiment_dirs"], rec["metric"], rec["mode"])
    assert sorted(t.params["lr"] for t in trials) == [0.02, 0.02, 0.3, 0.3]
    # the trial with the lowest val/loss anywhere in its kept checkpoints, and that checkpoint
    kept: dict[str, tuple[float, str]] = {}
    for trial_dir in _trial_dirs(rec):
        losses = {r["training_iteration"]: r["val/loss"] for r in _rows(trial_dir)}
        for ck in trial_dir.glob("checkpoint_*"):
            kept[str(ck)] = (losses[int(ck.name.split("_")[1]) + 1], trial_dir.name)
    best_ck = min(kept, key=lambda k: kept[k][0])
    proc = env.run("promote", "latest", "--model-name", "digits-loss", check=True)
    assert "registered digits-loss version 1" in proc.stdout
    c = mlflow_client(env.tracking_uri)
    version = c.get_model_version("digits-loss", "1")
    # the repeats of a grid point share its seed, so two checkpoints can tie: any with the lowest loss
    assert version.tags["checkpoint"] in kept and kept[version.tags["checkpoint"]][0] == kept[best_ck][0], \
        (version.tags["checkpoint"], kept)
    assert float(version.tags["metric_value"]) == pytest.approx(kept[best_ck][0])
    child = [r for r in _runs(env, rec) if r.data.tags.get("sweeps.trial_id") == version.tags["trial_id"]]
    assert version.tags["checkpoint"] == child[0].data.tags["best_checkpoint"], "tracker and promotion agree"
