"""The sweep driver's memory over thousands of short trials: RSS against finished trials, and MLflow's share.

`sweeps`' whole run pipeline in one fresh process (``prepare`` + ``execute``: MLflow parent and child runs, the
index record, every callback, results read back, summary, report), with the trial swapped for a trivial function
trainable (as benchmarks/scale.py does: the bookkeeping path, no Train) that reports a tiny checkpoint with every
result (the tracker's and the keeper's per-checkpoint state is what a real sweep grows most). A thread samples the
driver's own RSS (``/proc/self/status``) every second together with the finished-trial count the driver writes into
the sweep's live record (``sweeps-live/status.json``). Printed: the RSS after the first ``--warm`` finished trials
and at the end, the growth per finished trial past those, the peak, MLflow's share of the driver's wall time (the
tracker's own timer), and how long ``sweeps list``/``status``/``report`` take on the finished sweep.

With ``SWEEPS_BENCH_TRACEMALLOC=1`` the driver traces its Python allocations (``tracemalloc``, 10 frames; slows
the driver) and prints what grew between the ``--warm``-th finished trial and 90% of them (before the report),
by the line that allocated it (the biggest 25) and by file.

    python benchmarks/memory.py [--trials 5000] [--concurrency 4] [--warm 500] [--out benchmarks/results/memory.txt]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRACE = "SWEEPS_BENCH_TRACEMALLOC"
METRIC = "val/acc"


def trivial(config: dict[str, Any], reports: int) -> None:
    """A function trainable that does no training: ``reports`` results, each with a tiny checkpoint."""
    import tempfile as _tempfile

    from ray import tune

    for i in range(1, reports + 1):
        with _tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"epoch": i}))
            tune.report({METRIC: float(config.get("lr", 0.0)) * i, "epoch": i},
                        checkpoint=tune.Checkpoint.from_directory(d))


def growth(first: Any, last: Any, top: int = 25) -> list[str]:
    """What grew between two tracemalloc snapshots: by allocating line (``top``), then by file."""
    import tracemalloc

    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    a, b = first.filter_traces(keep), last.filter_traces(keep)
    lines = ["  tracemalloc: grown by line (KiB, blocks):"]
    for stat in b.compare_to(a, "lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"    {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}  {frame.filename}:{frame.lineno}")
    lines.append("  tracemalloc: grown by call path (KiB; the innermost sweeps/Ray/MLflow frame, then the line):")
    for stat in b.compare_to(a, "traceback")[:top]:
        ours = [f for f in stat.traceback if any(k in f.filename for k in ("/sweeps/", "/ray/", "/mlflow/"))]
        at = ours[-1] if ours else stat.traceback[-1]
        leaf = stat.traceback[-1]
        lines.append(f"    {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}  {at.filename}:{at.lineno}"
                     f" -> {Path(leaf.filename).name}:{leaf.lineno}")
    lines.append("  tracemalloc: grown by file (KiB):")
    for stat in b.compare_to(a, "filename")[:top]:
        lines.append(f"    {stat.size_diff / 1024:+9.1f} KiB  {stat.traceback[0].filename}")
    return lines


def rss_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def finished(home: Path) -> int | None:
    for path in glob.glob(str(home / "ray" / "*" / "sweeps-live" / "status.json")):
        try:
            t = json.loads(Path(path).read_text())["trials"]
        except (OSError, ValueError, KeyError):
            return None
        return int(t.get("done", 0)) + int(t.get("stopped_early", 0)) + int(t.get("failed", 0))
    return None


def child(a: argparse.Namespace) -> None:
    from ray import tune

    from sweeps.execution.tuning import tuner
    from sweeps.ops import prepare
    from sweeps.ops import run as runner

    home = Path(os.environ["SWEEPS_HOME"])
    samples: list[tuple[float, int, int | None]] = []
    done = threading.Event()
    tracing = os.environ.get(TRACE) == "1"
    snaps: list[Any] = []
    if tracing:
        import tracemalloc

        tracemalloc.start(10)

    def sample() -> None:
        while not done.is_set():
            n = finished(home)
            samples.append((time.time(), rss_kb(), n))
            if tracing and n is not None and len(snaps) < 2 and n >= (a.warm, int(0.9 * a.trials))[len(snaps)]:
                snaps.append((n, tracemalloc.take_snapshot()))  # past the warm-up; near the end, before the report
            done.wait(1.0)

    def function_trainable(spec: Any, sweep_id: str) -> Any:
        fn = tune.with_parameters(trivial, reports=a.reports)
        return tune.with_resources(fn, {"cpu": spec.cluster.driver_cpus, **spec.cluster.driver_resources})

    tuner.trainable = function_trainable  # the bookkeeping path (benchmarks/scale.py)
    overrides = ["+experiment=quickstart", "scheduler=fifo", f"sweep.num_samples={a.trials}",
                 f"sweep.max_concurrent_trials={a.concurrency}", "trainable.num_workers=1",
                 f"trainable.params.epochs={a.reports}", "sweep.name=memory"]
    spec = prepare.prepare(overrides)
    threading.Thread(target=sample, daemon=True).start()
    t = time.perf_counter()
    out = runner.execute(spec, overrides)
    wall = time.perf_counter() - t
    done.set()
    if tracing and len(snaps) == 2:
        (n0, first), (n1, last) = snaps
        print(f"  tracemalloc: {n0} -> {n1} finished trials", flush=True)
        print("\n".join(growth(first, last)), flush=True)
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=out.record.tracking_uri).get_run(out.record.parent_run_id).data.metrics
    print("MEMORY " + json.dumps({"samples": samples, "wall": wall, "fit": out.record.wall_s,
                                  "mlflow_s": metrics.get("sweeps/mlflow_seconds"),
                                  "peak_mb": out.record.driver_peak_rss_mb, "sweep_id": out.record.sweep_id,
                                  "trials": out.summary.counts.get("total")}), flush=True)


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t


def summarize(a: argparse.Namespace, got: dict[str, Any], home: Path, env: dict[str, str]) -> list[str]:
    samples = [(t, kb, n) for t, kb, n in got["samples"] if n is not None]
    warm = next(((t, kb, n) for t, kb, n in samples if n >= a.warm), None)
    most = max((n for _, _, n in samples), default=0)
    last = next(((t, kb, n) for t, kb, n in samples if n == most), None)  # the last trial's end, not the report
    lines = [f"memory: {got['trials']} trivial trials x {a.reports} results, concurrency {a.concurrency}; "
             f"Tuner.fit {got['fit']:.0f} s ({got['fit'] / max(1, got['trials']) * 1e3:.0f} ms/trial)"]
    if warm and last and last[2] > warm[2]:
        per = (last[1] - warm[1]) / (last[2] - warm[2])
        lines.append(f"  driver RSS: {warm[1] / 1024:.0f} MiB at {warm[2]} finished trials, {last[1] / 1024:.0f} MiB "
                     f"at {last[2]}: {per:+.1f} KiB per finished trial past the first {a.warm} (goal <= 50 KB)")
    else:
        lines.append(f"  driver RSS: fewer than {a.warm} trials finished while sampled; no growth figure")
    lines.append(f"  driver peak RSS until the sweep's record closed (getrusage, as the report states it): "
                 f"{got['peak_mb']:.0f} MiB; sampled at the very end (after the report): "
                 f"{got['samples'][-1][1] / 1024:.0f} MiB")
    for t, kb, n in samples[:: max(1, len(samples) // 12)]:
        lines.append(f"    t={t - samples[0][0]:6.0f} s  finished {n:5d}  RSS {kb / 1024:6.0f} MiB")
    if got.get("mlflow_s") is not None:
        lines.append(f"  MLflow calls: {got['mlflow_s']:.1f} s of the driver's {got['wall']:.0f} s "
                     f"({got['mlflow_s'] / got['wall']:.1%}; goal <= 5%)")
    cli = [sys.executable, "-m", "sweeps"]
    for what, args in (("list", ["list"]), ("status", ["status", got["sweep_id"]]),
                       ("report --format md", ["report", got["sweep_id"], "--format", "md"]),
                       ("report --format all", ["report", got["sweep_id"], "--format", "all"])):
        lines.append(f"  sweeps {what}: {timed([*cli, *args], env, home):.2f} s (goal < 2 s)")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5000)
    p.add_argument("--reports", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--warm", type=int, default=500)
    p.add_argument("--out", default="")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    home = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    env = {**os.environ, "SWEEPS_HOME": str(home / ".sweeps"), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--trials", str(a.trials), "--reports",
           str(a.reports), "--concurrency", str(a.concurrency), "--warm", str(a.warm)]
    proc = subprocess.run(cmd, env=env, cwd=home, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("MEMORY ")), None)
    if line is None:
        sys.exit(f"the sweep did not finish (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    traced = [x for x in proc.stdout.splitlines() if x.startswith("  tracemalloc") or x.startswith("    ")]
    text = "\n".join([f"$ {TRACE}={os.environ.get(TRACE, '0')} python benchmarks/{Path(__file__).name} --trials "
                      f"{a.trials} --concurrency {a.concurrency} --warm {a.warm}",
                      *summarize(a, json.loads(line[len("MEMORY "):]), home, env), *traced])
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
