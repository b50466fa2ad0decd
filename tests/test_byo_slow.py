"""Bring your own loop: a loop written like the Ray docs (epochs from 0, ``get_checkpoint()``, its own
``state.pt``, no timing metrics) under ASHA, with the driver SIGKILLed mid-sweep and the sweep resumed.

What must hold: completion and early stopping are counted from what Tune observed (not from the loop's 0-based
``epoch``), the training time behind the efficiency figure (Tune's time between reports, for a loop without
timing metrics) agrees within 20% with the loop's own timestamps (each epoch's start to its report's return;
an epoch the kill made run twice counts once or twice, as Tune saw it), and every trial continued after the
resume from its checkpoint (its epochs never restart from 0). PBT weight transfer with the same loop is in
tests/test_bridge_slow.py. Slow tier.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from conftest import SweepsEnv, trial_dirs, wait_for
from harness import Sweep

pytestmark = pytest.mark.slow

EPOCHS = 4
DOCS = ["trainable=ray_docs_style", "search_space=ray_docs_style", "sweep.metric=val_loss", "sweep.mode=min",
        "scheduler=asha", "scheduler.grace_period=1", "scheduler.reduction_factor=2", "sweep.num_samples=4",
        "sweep.max_concurrent_trials=2", "trainable.num_workers=1", f"trainable.params.epochs={EPOCHS}",
        "+trainable.params.epoch_sleep_s=0.8", "report.enabled=true", "cluster.health_check_interval_s=0.1",
        "cluster.worker_start_timeout_s=120"]


def _index(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def _rows(trial_dir: Path) -> list[dict]:
    f = trial_dir / "result.json"
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []


def _reported(env: SweepsEnv) -> int:
    found = list((env.home / "sweeps").glob("[!.]*.json"))
    if not found:
        return 0
    dirs = json.loads(found[0].read_text())["experiment_dirs"]
    return sum(len(_rows(d)) for d in trial_dirs(dirs[0]))


def _logged_train_s(folder: Path) -> tuple[float, float]:
    """The loop's own measure, each run of an epoch from its start to its report (its checkpoint written): (each
    (trial, epoch) counted once, at its last run; every run counted).

    A driver killed mid-sweep makes some epochs run twice. Whether Tune saw the first run depends on when the kill
    came: before its report reached the driver (Tune has one row for the epoch), or after the row was written but
    before Tune's experiment state was saved (the trial restores an older checkpoint and Tune records the epoch
    again). Tune's clock counts every report it received, so it lies between the two."""
    last: dict[tuple[float, int], float] = {}
    every = 0.0
    for f in folder.glob("epochs-*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            last[(e["lr"], e["epoch"])] = e["end"] - e["start"]
            every += e["end"] - e["start"]
    return sum(last.values()), every


def _diagnosis(trials: dict[str, list[dict]], log: Path) -> dict:
    """On a mismatch: each trial's Tune rows (iteration, since restore, time this iter) and the loop's spans."""
    tune = {n: [(r["training_iteration"], r.get("iterations_since_restore"), round(r["time_this_iter_s"], 2))
                for r in rows] for n, rows in trials.items()}
    loop = [json.loads(x) for f in log.glob("epochs-*.jsonl") for x in f.read_text().splitlines()]
    return {"tune": tune, "loop": [(e["lr"], e["epoch"], round(e["end"] - e["start"], 2)) for e in loop]}


def test_a_ray_docs_loop_under_asha_survives_a_driver_kill_and_is_counted_by_tune(sweep: Sweep, tmp_path: Path) -> None:
    """What the module's docstring says must hold, on one ASHA sweep of the Ray-docs loop. Why its own sweep: its
    driver is SIGKILLed mid-sweep (the subject), and the loop logs its own epochs to compare with Tune's."""
    from sweeps.reports.results import load_records
    from sweeps.reports.summary import collect

    env = sweep.env
    log = tmp_path / "epochs"
    log.mkdir()
    proc = env.popen("run", *DOCS, f"+trainable.params.epoch_log={log}")
    wait_for(lambda: _reported(env) >= 3, 480, what="three reported epochs")
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its session: a power cut
    proc.wait(timeout=30)
    env.kill_ray()
    out = env.run("resume", "latest", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rec = _index(env)
    assert rec["status"] == "finished", rec["status"]
    trials = {d.name: _rows(d) for d in trial_dirs(rec["experiment_dirs"][0])}
    assert len(trials) == 4 and all(trials.values())
    # resume continuity: the loop's epoch follows Tune's iteration in every row (never back to 0)
    for name, rows in trials.items():
        assert all(r["epoch"] == r["training_iteration"] - 1 for r in rows), (name, [
            (r["training_iteration"], r["epoch"]) for r in rows])
    # completion from Tune's iterations, not the loop's 0-based epoch (which never reaches EPOCHS)
    full = sum(1 for rows in trials.values() if max(r["training_iteration"] for r in rows) == EPOCHS)
    assert full >= 1 and rec["counts"]["completed"] == full, (rec["counts"], full)
    assert rec["counts"]["early_stopped"] == 4 - full, rec["counts"]
    # the training time behind the efficiency figure, against the loop's own timestamps
    summ = collect(load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], EPOCHS, settled=True),
                   rec["metric"], rec["mode"], max_epochs=EPOCHS, wall_s=rec["wall_s"], slots=rec["slots"])
    once, every = _logged_train_s(log)
    assert summ.t_ideal_s is not None and once > 0
    tune_s = summ.t_ideal_s * (rec["slots"] or 1)
    assert 0.8 * once <= tune_s <= 1.2 * every, (tune_s, once, every, _diagnosis(trials, log))
