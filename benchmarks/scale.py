"""Bookkeeping at scale: 1,000 trials of a trivial function trainable (no Train), and a 10,000-trial report.

Three ways to run the same Tune sweep (random search, FIFO, the same concurrency and logical CPUs), each in
a fresh process, alternating:
  raw         a bare ``tune.Tuner`` (what Ray itself costs per trial: an actor, results, experiment state);
  raw+mlflow  the same plus `sweeps`' tracking callback (``sweeps.tracking.callback.make_callback``, SQLite store):
              a child run per trial, batched metrics, final statuses;
  sweeps      `sweeps`' whole run pipeline in-process (``runner.prepare`` + ``runner.execute``: MLflow parent
              run, index record, tracking callback, results read back, summary, report) with
              ``sweeps.execution.tuning.tuner.trainable`` swapped for the trivial function trainable. `sweeps` has no
              function-trainable option today (see RESULTS.md for the proposed ``trainable.kind``); this
              swap is what that option would do.
Then runs benchmarks/report_scale.py (collect + CSV + Markdown on 10,000 synthetic trials, goal <= 2 s).

    python benchmarks/scale.py [--trials 1000] [--reports 2] [--concurrency 4] [--repeat 1]
        [--modes raw raw+mlflow sweeps] [--report-trials 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LAST_RUN, REPO, load_average, median, run_timed  # noqa: E402

MODES = ("raw", "raw+mlflow", "sweeps")
METRIC = "val/acc"


def trivial(config: dict[str, Any], reports: int) -> None:
    """A function trainable that does no work: ``reports`` results, then returns."""
    from ray import tune

    for i in range(1, reports + 1):
        tune.report({METRIC: float(config.get("lr", 0.0)) * i, "epoch": i})


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--reports", type=int, default=2, help="results per trial")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--report-trials", type=int, default=10_000, help="0 skips the report benchmark")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--home", help=argparse.SUPPRESS)
    return p.parse_args()


def sweeps_overrides(a: argparse.Namespace) -> list[str]:
    return ["+experiment=quickstart", "scheduler=fifo", f"sweep.num_samples={a.trials}",
            f"sweep.max_concurrent_trials={a.concurrency}", "trainable.num_workers=1",
            f"trainable.params.epochs={a.reports}", "sweep.name=scale"]


def raw_tuner(a: argparse.Namespace, storage: str, callbacks: list[Any]) -> Any:
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    space = {"lr": tune.loguniform(1e-3, 1e-1), "hidden_size": tune.choice([64, 128]),
             "batch_size": tune.choice([32, 64])}  # search_spaces/digits_small.yaml, as `sweeps` samples it
    return tune.Tuner(
        tune.with_resources(tune.with_parameters(trivial, reports=a.reports), {"cpu": 1}),
        param_space=space,
        tune_config=tune.TuneConfig(metric=METRIC, mode="max", num_samples=a.trials, scheduler=FIFOScheduler(),
                                    search_alg=BasicVariantGenerator(random_state=0, max_concurrent=a.concurrency),
                                    max_concurrent_trials=a.concurrency),
        run_config=tune.RunConfig(name="scale", storage_path=storage, callbacks=callbacks, verbose=1,
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=2,
                                                                          checkpoint_score_attribute=METRIC,
                                                                          checkpoint_score_order="max")),
    )


def tracker_for(home: Path, reports: int) -> Any:
    from sweeps.tracking import callback
    from sweeps.tracking import client as tracking

    uri = f"sqlite:///{home / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "scale", uri)
    parent = c.create_run(exp, run_name="scale", tags={tracking.RUN_TAG_SWEEP: "scale", tracking.RUN_TAG_KIND: "sweep"})
    return callback.make_callback(uri=uri, experiment_id=exp, parent_run_id=parent.info.run_id, sweep_id="scale",
                                  metric=METRIC, mode="max", fixed_params={"epochs": reports}, epochs=reports)


def child(a: argparse.Namespace) -> dict[str, Any]:
    """One run in this (fresh) process; returns its timings."""
    import ray

    home = Path(a.home)
    if a.child == "sweeps":
        return child_sweeps(a, home)
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
    ray.init(num_cpus=2 * a.concurrency, log_to_driver=False)  # the logical CPUs `sweeps`' plan would start
    tracker = tracker_for(home, a.reports) if a.child == "raw+mlflow" else None
    t = time.perf_counter()
    raw_tuner(a, str(home / "ray"), [tracker] if tracker else []).fit()
    fit_s = time.perf_counter() - t
    mlflow_s = 0.0
    if tracker is not None:
        tracker.close_open("KILLED")  # what `sweeps` does after fit (drains what is still buffered)
        mlflow_s = tracker.timer.seconds
    ray.shutdown()
    return {"fit": fit_s, "mlflow": mlflow_s}


def child_sweeps(a: argparse.Namespace, home: Path) -> dict[str, Any]:
    from ray import tune

    from sweeps.execution.tuning import tuner
    from sweeps.ops import prepare
    from sweeps.ops import run as runner

    def function_trainable(spec: Any, sweep_id: str) -> Any:
        fn = tune.with_parameters(trivial, reports=a.reports)
        return tune.with_resources(fn, {"cpu": spec.cluster.driver_cpus, **spec.cluster.driver_resources})

    tuner.trainable = function_trainable  # the proposed `trainable.kind: function`, from outside
    spec = prepare.prepare(sweeps_overrides(a))
    t = time.perf_counter()
    outcome = runner.execute(spec, sweeps_overrides(a))
    total = time.perf_counter() - t
    rec = outcome.record
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=rec.tracking_uri).get_run(rec.parent_run_id).data.metrics
    return {"fit": rec.wall_s, "execute": total, "mlflow": metrics.get("sweeps/mlflow_seconds", float("nan")),
            "trials": outcome.summary.counts.get("total"), "report_files": len(outcome.report_paths)}


def run_child(mode: str, a: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--home", str(home), "--trials",
           str(a.trials), "--reports", str(a.reports), "--concurrency", str(a.concurrency)]
    try:
        wall, proc = run_timed(cmd, home, {"SWEEPS_HOME": str(home)})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("SCALE "))
    return wall, json.loads(line[len("SCALE "):])


def main() -> None:
    a = parse_args()
    if a.child:
        print("SCALE " + json.dumps(child(a)), flush=True)
        return
    print(f"scale: {a.trials} trivial trials x {a.reports} results, concurrency {a.concurrency}; "
          f"load {load_average()}", flush=True)
    fits: dict[str, list[float]] = {m: [] for m in a.modes}
    for i in range(a.repeat):
        modes = a.modes if i % 2 == 0 else list(reversed(a.modes))
        for mode in modes:
            wall, out = run_child(mode, a)
            fits[mode].append(out["fit"])
            extra = f", execute {out['execute']:.1f} s (fit + bookkeeping + report)" if "execute" in out else ""
            print(f"  {mode:<11}: process {wall:6.1f} s, Tuner.fit {out['fit']:6.1f} s "
                  f"({out['fit'] / a.trials * 1e3:.0f} ms/trial){extra}; MLflow calls {out['mlflow']:.1f} s; "
                  f"{LAST_RUN['others']}; load {load_average()}", flush=True)
    if "raw" in fits:
        base = median(fits["raw"])
        for mode in a.modes:
            m = median(fits[mode])
            print(f"  {mode:<11}: median Tuner.fit {m:.1f} s = {m / base:.2f}x raw "
                  f"({(m - base) / a.trials * 1e3:+.0f} ms/trial)")
    if a.report_trials:
        print(f"report building on {a.report_trials} synthetic trials (benchmarks/report_scale.py):", flush=True)
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "report_scale.py"), "--trials",
                        str(a.report_trials)], check=True)


if __name__ == "__main__":
    main()
