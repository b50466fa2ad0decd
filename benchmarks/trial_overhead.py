"""Fixed cost per trial for 1, 2 and 4 Train workers: trial start -> first epoch, last epoch -> trial end.

Runs ``sweeps`` (and, with --handwritten, benchmarks/handwritten.py) with FIFO, one trial at a time, then
reads Tune's experiment state (driver clock, sub-millisecond): ``start`` = the trial's actor started
(status RUNNING; the tracking callback's ``on_trial_start`` runs just before), ``last`` = the driver got the
trial's last result, ``first`` = ``last`` minus the trainable's own report-to-report time span.

  start cost = first - start - (the first epoch's compute + data time, reported by the trainable)
  end cost   = the next trial's start - last (trials run one at a time, so this is the slot turnaround:
               Train teardown, trial function exit, Tune's completion bookkeeping and callbacks, the next
               trial actor's start). For `sweeps` also: the MLflow child run's end_time - last (set by
               ``set_terminated`` in ``on_trial_complete``, after the final metrics and the checkpoint
               artifact upload), which excludes the next actor's start.
  per report = mean gap between reports beyond the trainable's compute + data time.

    python benchmarks/trial_overhead.py [--workers 1 2 4] [--trials 3] [--epochs 3] [--handwritten]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    REPO,
    experiment_start,
    load_average,
    mlflow_trial_runs,
    run_sweeps,
    run_timed,
    stats,
    trial_timeline,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--handwritten", action="store_true", help="also measure benchmarks/handwritten.py")
    p.add_argument("--bridge", choices=("callback", "queue"), default="callback")
    return p.parse_args()


def train_s(row: dict[str, Any]) -> float:
    return float(row.get("time/compute_s", 0.0)) + float(row.get("time/data_s", 0.0))


def costs(timeline: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"start": [], "end": [], "report": []}
    done = [t for t in timeline if t["rows"]]
    for i, t in enumerate(done):
        out["start"].append(t["first"] - t["start"] - train_s(t["rows"][0]))
        gaps = [r["time_this_iter_s"] - train_s(r) for r in t["rows"][1:]]
        if gaps:
            out["report"].append(sum(gaps) / len(gaps))
        if i + 1 < len(done):
            out["end"].append(done[i + 1]["start"] - t["last"])
    return out


def sweeps_case(workers: int, a: argparse.Namespace) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-trial-overhead-"))
    try:
        wall, rec = run_sweeps(["run", "+experiment=quickstart", "scheduler=fifo",
                                f"sweep.num_samples={a.trials}", f"trainable.params.epochs={a.epochs}",
                                f"trainable.num_workers={workers}", "sweep.max_concurrent_trials=1"], home)
        exp = rec["experiment_dirs"][0]
        timeline = trial_timeline(exp)
        runs = mlflow_trial_runs(rec)
        t0 = experiment_start(exp)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    c = costs(timeline)
    ended = [t for t in timeline if t["rows"] and runs.get(t["trial_id"], (0, None))[1]]
    ml_end = [runs[t["trial_id"]][1] - t["last"] for t in ended]
    ml_start = [t["start"] - runs[t["trial_id"]][0] for t in timeline if t["trial_id"] in runs]
    print(f"sweeps, {workers} worker(s): process {wall:.1f} s, Tuner.fit {rec['wall_s']:.1f} s; "
          f"Tune start -> first trial start {timeline[0]['start'] - t0:.2f} s; load {load_average()}")
    print(f"  start -> first epoch        : {stats(c['start'])}")
    print(f"  last epoch -> next start    : {stats(c['end'])}")
    print(f"  last epoch -> MLflow run end: {stats(ml_end)}")
    print(f"  MLflow run created -> trial RUNNING: {stats(ml_start)}")
    print(f"  per report beyond training  : {stats(c['report'])}", flush=True)


def handwritten_case(workers: int, a: argparse.Namespace) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-trial-overhead-hw-"))
    cmd = [sys.executable, str(REPO / "benchmarks" / "handwritten.py"), "--trials", str(a.trials), "--epochs",
           str(a.epochs), "--workers", str(workers), "--concurrency", "1", "--bridge", a.bridge,
           "--storage", str(home / "ray")]
    try:
        wall, proc = run_timed(cmd, home)
        out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("HANDWRITTEN "))[12:])
        exp = home / "ray" / "handwritten"
        timeline = trial_timeline(exp)
        t0 = experiment_start(exp)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    c = costs(timeline)
    print(f"handwritten ({a.bridge}), {workers} worker(s): process {wall:.1f} s, Tuner.fit {out['fit_s']:.1f} s; "
          f"Tune start -> first trial start {timeline[0]['start'] - t0:.2f} s; load {load_average()}")
    print(f"  start -> first epoch        : {stats(c['start'])}")
    print(f"  last epoch -> next start    : {stats(c['end'])}")
    print(f"  per report beyond training  : {stats(c['report'])}", flush=True)


def main() -> None:
    a = parse_args()
    print(f"trial_overhead: {a.trials} trials x {a.epochs} epochs, one at a time, FIFO; load {load_average()}")
    for w in a.workers:
        sweeps_case(w, a)
        if a.handwritten:
            handwritten_case(w, a)


if __name__ == "__main__":
    main()
