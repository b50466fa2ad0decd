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

--stages (issue 22): each stage of a trial's start-up, in seconds after its Tune start, median over trials,
from the stamps `sweeps` writes when $SWEEPS_STAGE_LOG is set (sweeps/execution/train/stages.py: trial actor up,
Train controller up, placement group ready, workers up, process group ready, the loop started on every rank,
the driver got the first epoch; plus Train V2's own debug timings, and which actors landed on warm
processes). Cases: N workers one trial at a time ("1", "2", "4") and two trials at a time ("2x2"). Variants
(a checkout, optionally with env vars) run alternately case by case, so each comparison is one run:

    python benchmarks/trial_overhead.py --stages --trials 3 --epochs 3 --cases 1 2 4 2x2 \
        --variant before=/work/main --variant after=. --variant after-nowarm=.,SWEEPS_WARM_POOL=0

A checkout without the stamps (before issue 22) still gets the old "start -> first epoch" figure.

--quickstart: the whole quickstart (`run +experiment=quickstart`, report included), each variant in turn,
--repeat times: process wall, Tuner.fit, CPU of the process tree, trials/epochs trained, best result.
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
    trial_rows,
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
    p.add_argument("--stages", action="store_true", help="per-stage start-up of each variant (see above)")
    p.add_argument("--cases", nargs="+", default=["1", "2", "4", "2x2"])
    p.add_argument("--variant", action="append", default=[], help="LABEL=CHECKOUT[,KEY=VALUE...]")
    p.add_argument("--quickstart", action="store_true", help="whole quickstart per variant (see above)")
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


def variants(a: argparse.Namespace) -> list[tuple[str, Path, dict[str, str]]]:
    """``LABEL=CHECKOUT[,KEY=VALUE...]``; a piece without ``=`` continues the previous value (a value with commas:
    ``SWEEPS_LEVERS_OFF=site_preload,controller_in_trial``)."""
    out = []
    for v in a.variant or [f"this={REPO}"]:
        label, _, rest = v.partition("=")
        path, *pieces = rest.split(",")
        env: dict[str, str] = {}
        last = ""
        for piece in pieces:
            if "=" in piece:
                last, _, value = piece.partition("=")
                env[last] = value
            elif last:
                env[last] += "," + piece
        out.append((label, Path(path).resolve(), env))
    return out


def stage_run(checkout: Path, env: dict[str, str], workers: int, conc: int, a: argparse.Namespace
              ) -> tuple[float, dict[str, dict[str, float]], list[float], dict[str, str]]:
    """One `sweeps run` (FIFO): (process wall, stages per trial, old-style start costs, landing)."""
    from _stages import landing, per_trial, read_stamps

    home = Path(tempfile.mkdtemp(prefix="bench-stages-"))
    log = home / "stages.jsonl"
    extra = {"SWEEPS_HOME": str(home), "SWEEPS_STAGE_LOG": str(log), "PYTHONPATH": str(checkout),
             "SWEEPS_CONF_DIR": str(checkout / "conf"), **env}
    n = a.trials * (2 if conc > 1 else 1)
    cmd = [sys.executable, "-m", "sweeps", "run", "+experiment=quickstart", "scheduler=fifo",
           f"sweep.num_samples={n}", f"trainable.params.epochs={a.epochs}", f"trainable.num_workers={workers}",
           f"sweep.max_concurrent_trials={conc}", "report.enabled=false"]
    try:
        wall, _ = run_timed(cmd, home, extra)
        (rec_path,) = list((home / "sweeps").glob("*.json"))
        exp = json.loads(rec_path.read_text())["experiment_dirs"][0]
        timeline = trial_timeline(exp)
        stamps = read_stamps(log)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    stages = per_trial(stamps, {t["trial_id"]: t["start"] for t in timeline if t["start"]})
    return wall, stages, costs(timeline)["start"], landing(stamps)


def stages_main(a: argparse.Namespace) -> None:
    from _common import median
    from _stages import STAGES

    vs = variants(a)
    names = ", ".join(f"{lb}={p} {e or ''}" for lb, p, e in vs)
    print(f"trial_overhead --stages: {a.trials} trials (x2 for two at a time) x {a.epochs} epochs, FIFO; "
          f"variants: {names}; load {load_average()}", flush=True)
    for case in a.cases:
        workers, conc = (int(case.split("x")[1]), 2) if "x" in case else (int(case), 1)
        for label, checkout, env in vs:
            wall, stages, starts, land = stage_run(checkout, env, workers, conc, a)
            keys = [k for k in (*STAGES, "pg_ready") if any(k in s for s in stages.values())]
            keys += sorted({k for s in stages.values() for k in s if k not in keys})
            print(f"[{case}] {label}: process {wall:.1f} s; {LAST_RUN['others']}; load {load_average()}")
            print(f"  start -> first epoch (old measure): {stats(starts)}")
            for k in dict.fromkeys(keys):
                vals = [s[k] for s in stages.values() if k in s]
                print(f"  {k:<28}: {median(vals):6.2f} s  (n={len(vals)}, min {min(vals):.2f}, max {max(vals):.2f})")
            if stages:
                print("  landing: " + "; ".join(f"{k} {v}" for k, v in land.items()), flush=True)


def quickstart_main(a: argparse.Namespace) -> None:
    from _common import median

    vs = variants(a)
    print(f"trial_overhead --quickstart: {a.repeat} run(s) per variant, alternating; load {load_average()}")
    walls: dict[str, list[float]] = {lb: [] for lb, _, _ in vs}
    for i in range(a.repeat):
        for label, checkout, env in (vs if i % 2 == 0 else vs[::-1]):
            home = Path(tempfile.mkdtemp(prefix="bench-qs-"))
            extra = {"SWEEPS_HOME": str(home), "PYTHONPATH": str(checkout), "SWEEPS_CONF_DIR": str(checkout / "conf"),
                     **env}
            try:
                wall, _ = run_timed([sys.executable, "-m", "sweeps", "run", "+experiment=quickstart"], home, extra)
                (rec_path,) = list((home / "sweeps").glob("*.json"))
                rec = json.loads(rec_path.read_text())
                rows = sum(len(r) for r in trial_rows(rec).values())
            finally:
                shutil.rmtree(home, ignore_errors=True)
            walls[label].append(wall)
            c = rec["counts"]
            print(f"  {label}: process {wall:.1f} s, Tuner.fit {rec['wall_s']:.1f} s, CPU {LAST_RUN['cpu_s']:.0f} s; "
                  f"{c['total']} trials ({c['completed']} completed, {c['early_stopped']} early-stopped, "
                  f"{c['failed']} failed), {rows} epochs; best {rec['best'].get('value', float('nan')):.4f}; "
                  f"{LAST_RUN['others']}; load {load_average()}", flush=True)
    base = median(walls[vs[0][0]])
    for label, ws in walls.items():
        print(f"{label}: median process wall {median(ws):.1f} s = {median(ws) / base:.2f}x {vs[0][0]}")


def main() -> None:
    a = parse_args()
    if a.quickstart:
        quickstart_main(a)
        return
    if a.stages:
        stages_main(a)
        return
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
