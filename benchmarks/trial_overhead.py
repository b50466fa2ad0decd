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
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    LAST_RUN,
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
    p.add_argument("--decompose", action="store_true", help="Train-only phases (no Tune), see above")
    p.add_argument("--repeat", type=int, default=3, help="--decompose: fits per (setting, workers, trainer)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args()


SETTINGS = {
    "hc=0.1 (sweeps)": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1"},
    "hc=2.0 (Ray default)": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "2.0"},
    "hc=0.1, no preemption watcher, no structured logs": {
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
        "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0", "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0"},
}
TRAINERS = ("plain (no process group)", "torch (gloo group)", "torch + digits prep")


def stamped(config: dict[str, Any]) -> None:
    """Train function: stamps start / ready / reported times into config["stamps"]/<rank>.json."""
    import time as _time

    import ray.train

    t_start = _time.time()
    if config["prep"]:
        import ray.train.torch
        import torch

        from trainables import common, digits

        common.set_threads({})
        digits.load_data()
        ray.train.torch.prepare_model(digits.build_model({}))
        torch.manual_seed(0)
    t_ready = _time.time()
    ray.train.report({"x": 1.0})
    rank = ray.train.get_context().get_world_rank()
    stamps = {"start": t_start, "ready": t_ready, "reported": _time.time()}
    with open(os.path.join(config["stamps"], f"{rank}.json"), "w") as f:
        json.dump(stamps, f)


def fit_phases(trainer_kind: str, workers: int, tmp: Path) -> dict[str, float]:
    import ray.train
    from ray.train.torch import TorchTrainer
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    stamps = Path(tempfile.mkdtemp(dir=tmp))
    cls = DataParallelTrainer if trainer_kind.startswith("plain") else TorchTrainer
    trainer = cls(stamped, train_loop_config={"stamps": str(stamps), "prep": trainer_kind.endswith("prep")},
                  scaling_config=ray.train.ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
                  run_config=ray.train.RunConfig(name=f"d{time.time_ns()}", storage_path=str(tmp / "train")))
    t0 = time.time()
    trainer.fit()
    t_end = time.time()
    ranks = [json.loads(p.read_text()) for p in stamps.glob("*.json")]
    start = max(r["start"] for r in ranks)
    ready = max(r["ready"] for r in ranks)
    reported = max(r["reported"] for r in ranks)
    return {"launch": start - t0, "prep": ready - start, "report": reported - ready, "teardown": t_end - reported,
            "total": t_end - t0}


def decompose_child(a: argparse.Namespace) -> None:
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="decompose-"))
    ray.init(num_cpus=1 + max(a.workers), log_to_driver=False)
    out: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        fit_phases(TRAINERS[1], 1, tmp)  # warm-up (first worker processes, imports): not counted
        for w in a.workers:
            for _ in range(a.repeat):
                for kind in TRAINERS:
                    out.setdefault(str(w), {}).setdefault(kind, []).append(fit_phases(kind, w, tmp))
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print("DECOMPOSE " + json.dumps(out), flush=True)


def decompose(a: argparse.Namespace) -> None:
    from _common import median

    print(f"decompose: Train-only fit() phases, median of {a.repeat}; load {load_average()}")
    for name, env in SETTINGS.items():
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "decompose", "--repeat", str(a.repeat),
               "--workers", *map(str, a.workers)]
        wall, proc = run_timed(cmd, REPO, env)
        data = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("DECOMPOSE "))[10:])
        print(f"[{name}] ({wall:.0f} s; {LAST_RUN['others']}; load {load_average()})")
        for w, kinds in data.items():
            for kind, runs in kinds.items():
                ph = {k: median([r[k] for r in runs]) for k in runs[0]}
                print(f"  {w} worker(s), {kind:<26}: " + ", ".join(f"{k} {v:.2f}" for k, v in ph.items()) + " s")


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
          f"Tune start -> first trial start {timeline[0]['start'] - t0:.2f} s; {LAST_RUN['others']}; "
          f"load {load_average()}")
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
          f"Tune start -> first trial start {timeline[0]['start'] - t0:.2f} s; {LAST_RUN['others']}; "
          f"load {load_average()}")
    print(f"  start -> first epoch        : {stats(c['start'])}")
    print(f"  last epoch -> next start    : {stats(c['end'])}")
    print(f"  per report beyond training  : {stats(c['report'])}", flush=True)


def main() -> None:
    a = parse_args()
    if a.child == "decompose":
        decompose_child(a)
        return
    if a.decompose:
        decompose(a)
        return
    print(f"trial_overhead: {a.trials} trials x {a.epochs} epochs, one at a time, FIFO; load {load_average()}")
    for w in a.workers:
        sweeps_case(w, a)
        if a.handwritten:
            handwritten_case(w, a)


if __name__ == "__main__":
    main()
