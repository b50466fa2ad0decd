"""The Train -> Tune bridge on the unhappy paths: a driver that lags, the disk it leaves, a plain Ray-docs loop
under PBT and a Tune retry. No state carried from one trial's processes to the next: the searcher sweeps of
tests/test_sweep_slow.py (each trial's Train worker a fresh process). Slow tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SweepsEnv
from harness import Sweep

from sweeps import uris

pytestmark = pytest.mark.slow


def _rows(trial_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (trial_dir / "result.json").read_text().splitlines() if x.strip()]


def _index(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def test_lagging_driver_gets_every_checkpoint_and_keeps_the_best_n(sweep: Sweep) -> None:
    """Issue 19 items 7 and 8: a Tune callback 0.4 s per result behind a 30-epoch Train run (epochs ~0.1 s).

    Before the bounded bridge, Train ran ahead, deleted checkpoints the driver had not copied yet, and the
    trial failed with FileNotFoundError. Now: 30 results, the trial folder holds the best
    ``checkpoint.num_to_keep`` checkpoints by the sweep metric plus the latest one (Tune keeps it for resume),
    and no Train run folder is left. Why its own sweep: its driver is slowed on purpose (tests/bridge_sweep.py
    adds the lagging callback), which no shared sweep may be."""
    env = sweep.env
    keep, epochs = 2, 30
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bridge_sweep.py"), "0.4", "+experiment=quickstart",
         "scheduler=fifo", "sweep.num_samples=1", "trainable.num_workers=1", "trainable.in_process=false",
         f"trainable.params.epochs={epochs}",
         "search_space.lr={dist: choice, values: [0.01]}", f"checkpoint.num_to_keep={keep}",
         "sweep.metric=val/loss", "sweep.mode=min", "cluster.health_check_interval_s=0.1"],
        cwd=env.root, env=env.env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    (trial,) = out["trials"]
    assert trial["error"] is None, trial["error"]
    rows = _rows(Path(trial["path"]))
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))
    kept = {d.name for d in Path(trial["path"]).iterdir() if d.name.startswith("checkpoint_")}
    best = sorted(rows, key=lambda r: r["val/loss"])[:keep]
    expected = {r["checkpoint_dir_name"] for r in [*best, rows[-1]]}
    assert kept == expected, (kept, expected)
    train_runs = uris.join(out["storage"], "bridgetest-train")  # a storage location: through sweeps.uris
    assert not uris.exists(train_runs), uris.listdir(train_runs)[:10]


DOCS = ["trainable=ray_docs_style", "search_space=ray_docs_style", "sweep.metric=val_loss", "sweep.mode=min",
        "report.enabled=false", "cluster.health_check_interval_s=0.1"]


def test_ray_docs_loop_continues_from_the_pbt_donor(sweep: Sweep) -> None:
    """Issue 23: a loop that only calls ``ray.train.get_checkpoint()`` (2 workers) gets the donor's weights.
    Why its own sweep: the Ray-docs loop under PBT (ray_docs_pbt) is the subject; no other sweep runs it."""
    env = sweep.env
    env.run("run", "+experiment=ray_docs_pbt", "sweep.num_samples=1", "sweep.max_concurrent_trials=2",
            "trainable.params.epochs=4", "search_space.lr={dist: grid, values: [0.00001, 0.05]}",
            "report.enabled=false", check=True, timeout=900)
    exp = Path(_index(env)["experiment_dirs"][0])
    dirs = {d.name.split("_")[4]: d for d in exp.iterdir() if d.is_dir() and d.name.startswith("run_")}
    policy = [json.loads(x) for x in (exp / "pbt_global.txt").read_text().splitlines() if x.strip()]
    assert policy, "PBT never exploited"
    target, donor = policy[0][:2]
    rows, donor_rows = _rows(dirs[target.split("_")[0]]), _rows(dirs[donor.split("_")[0]])
    k = next(i for i, r in enumerate(rows) if i > 0 and r["iterations_since_restore"] == 1)  # 1st restore
    before, after = rows[k - 1], rows[k]
    # Tune restores the donor's iteration count with its checkpoint (PBT's log lags in synchronous mode)
    at_clone = next(r for r in donor_rows if r["training_iteration"] == after["training_iteration"] - 1)
    assert after["epoch"] == at_clone["epoch"] + 1, (before, after, at_clone)
    # the donor's weights: the recipient's loss jumps to the donor's level, away from its own
    assert abs(after["val_loss"] - at_clone["val_loss"]) < 0.5 * abs(before["val_loss"] - at_clone["val_loss"]), \
        (before["val_loss"], after["val_loss"], at_clone["val_loss"])
    assert not list(exp.parent.glob("*-train/*")), ("Train run folders left behind",
                                                     [str(p) for p in exp.parent.glob("*-train/**/*")])
    assert not list(exp.glob("*/sweeps-donor-*")), "PBT pins left behind"


def test_ray_docs_loop_resumes_after_a_tune_retry(sweep: Sweep) -> None:
    """A Ray-docs loop that fails once at epoch 2 is retried by Tune and goes on from its checkpoint (each epoch
    reported once).
    Why its own sweep: its trial fails on purpose (fail_once_at_epoch), which no shared sweep may."""
    from sweeps.reports.results import load_records

    env = sweep.env
    env.run("run", *DOCS, "scheduler=fifo", "sweep.num_samples=1", "trainable.num_workers=1",
            "trainable.params.epochs=5", "+trainable.params.fail_once_at_epoch=2", "failure.max_failures=1",
            "failure.worker_max_failures=0", check=True, timeout=900)
    rec = _index(env)
    (trial,) = load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], 5)
    assert trial.num_failures == 1 and trial.status == "TERMINATED", (trial.num_failures, trial.status)
    assert [r["epoch"] for r in _rows(Path(trial.path))] == [0, 1, 2, 3, 4], "the retry restarted from 0"
