"""The sweep driver's memory over thousands of trials: a real sweep of in-process trials, a row every 100 finished.

A project folder of the benchmark's own holds a tiny loop (``ray.train.report`` of one metric with a tiny checkpoint,
``--reports`` times), run as a user's trainable is: ``num_workers: 1``, so each trial trains in its Tune trial's own
process and Tune reuses the process for the next (issue 51), with the whole pipeline (MLflow parent and child runs,
the sweep's record, every callback, the report). The sweep runs in a child process (``prepare`` + ``execute``, as
``python -m sweeps run`` does) whose sampling thread prints, every ``--every`` finished trials, a row: finished
trials, the driver's RSS (``/proc/self/status``), the seconds the driver spent in MLflow calls so far (the
tracker's own timer), and the size of Tune's experiment state on disk. A run cut short still leaves its rows.

At the end: the RSS growth per finished trial past the first ``--warm`` (goal <= 50 KB), the driver's peak, MLflow's
share of the driver's wall (goal <= 5%), and how long ``sweeps list``/``status``/``report`` take on the finished
sweep (goal < 2 s each; the report twice: the first keeps the trials' model ids beside the sweep's trial index,
``sweeps/reports/trialindex.py``, and later ones read both).

``SWEEPS_MALLOC_TRIM=0`` runs the driver without its heap trim (``sweeps/execution/run/memtrim.py``), the
baseline of that trim; ``SWEEPS_BENCH_TRIM=1`` trims once more at each printed row.

With ``SWEEPS_BENCH_TRACEMALLOC=1`` the driver traces its Python allocations from the ``--warm``-th finished trial on
(``tracemalloc``, 10 frames; slows the driver) and prints what grew until 90% of them had finished, by allocating line
and file.

    python benchmarks/memory.py [--trials 5000] [--concurrency 4] [--every 100] [--warm 500] [--out FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRACE = "SWEEPS_BENCH_TRACEMALLOC"
CALLS: dict[str, list[float]] = {}  # MlflowClient method -> [calls, seconds] (the child's own count)

LOOP = textwrap.dedent('''
    """A tiny loop: ``reports`` results of one metric, each with a tiny checkpoint (benchmarks/memory.py)."""
    import json, os, tempfile


    def train_loop(config):
        import ray.train

        for i in range(int(config["reports"])):
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"epoch": i}, f)
                ray.train.report({"score": float(config["lr"]) * (i + 1), "epoch": i},
                                 checkpoint=ray.train.Checkpoint.from_directory(d))
''')

TRAINABLE = textwrap.dedent("""
    name: tiny
    loop: tinyloop.train_loop
    metrics: [score, epoch]
    num_workers: 1
    in_process: auto
    use_gpu: false
    resources_per_worker: {CPU: 1}
    placement_strategy: PACK
    checkpoint_every: 1
    params:
      reports: 1
""")

EXPERIMENT = textwrap.dedent("""
    # @package _global_
    defaults:
      - override /trainable: tiny
      - override /search_space: tiny
      - override /searcher: random
      - override /scheduler: fifo
    sweep:
      name: memory
      metric: score
      mode: max
    security:
      allowed_targets: [tinyloop]
""")


def project(root: Path) -> Path:
    """The benchmark's project folder; returns its conf folder."""
    for sub in ("conf/trainable", "conf/experiment", "search_spaces"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "tinyloop.py").write_text(LOOP)
    (root / "conf" / "trainable" / "tiny.yaml").write_text(TRAINABLE)
    (root / "conf" / "experiment" / "tiny.yaml").write_text(EXPERIMENT)
    (root / "search_spaces" / "tiny.yaml").write_text("lr: {dist: uniform, low: 0.0, high: 1.0}\n")
    return root / "conf"


def growth(first: Any, last: Any, top: int = 25) -> list[str]:
    """What grew between two tracemalloc snapshots: by allocating line (``top``), then by file."""
    import tracemalloc

    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    a, b = first.filter_traces(keep), last.filter_traces(keep)
    lines = ["  tracemalloc: grown by line (KiB, blocks):"]
    for stat in b.compare_to(a, "lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"    {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}  {frame.filename}:{frame.lineno}")
    lines.append("  tracemalloc: grown by file (KiB):")
    for stat in b.compare_to(a, "filename")[:top]:
        lines.append(f"    {stat.size_diff / 1024:+9.1f} KiB  {stat.traceback[0].filename}")
    return lines


def rss_kb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def live(home: Path) -> tuple[int | None, int]:
    """Finished trials (the sweep's live status) and the bytes of Tune's experiment state on disk."""
    n = None
    for path in glob.glob(str(home / "ray" / "*" / "sweeps-live" / "status.json")):
        try:
            t = json.loads(Path(path).read_text())["trials"]
            n = int(t.get("done", 0)) + int(t.get("stopped_early", 0)) + int(t.get("failed", 0))
        except (OSError, ValueError, KeyError):
            pass
    state = sum(os.path.getsize(p) for p in glob.glob(str(home / "ray" / "*" / "experiment_state-*.json")))
    return n, state


def mlflow_seconds() -> tuple[float, float] | None:
    """The seconds this driver spent in MLflow calls so far, all and those on Tune's loop: the running sweep's
    tracker's own timer."""
    from sweeps.execution.run import session

    for s in list(session._sessions.values()):
        for cb in list(s.callbacks.values()):
            timer = getattr(cb, "timer", None)
            if timer is not None and hasattr(timer, "seconds"):
                return float(timer.seconds), float(getattr(timer, "loop_seconds", timer.seconds))
    return None


def count_calls() -> None:
    """Count the driver's MLflow calls and their seconds by ``MlflowClient`` method (any thread)."""
    import functools

    from mlflow.tracking import MlflowClient

    def wrap(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                c = CALLS.setdefault(name, [0, 0.0])
                c[0] += 1
                c[1] += time.perf_counter() - t
        return timed_call

    for name, fn in list(vars(MlflowClient).items()):
        if callable(fn) and not name.startswith("_"):
            setattr(MlflowClient, name, wrap(name, fn))


def child(a: argparse.Namespace) -> None:
    from sweeps.ops import prepare
    from sweeps.ops import run as runner

    home = Path(os.environ["SWEEPS_HOME"])
    samples: list[tuple[float, int, int | None, tuple[float, float] | None, int]] = []
    done = threading.Event()
    tracing = os.environ.get(TRACE) == "1"
    snaps: list[Any] = []
    began = time.time()
    count_calls()
    trim = None
    if os.environ.get("SWEEPS_BENCH_TRIM") == "1":  # glibc gives freed heap back to the OS at each row
        from sweeps.execution.run import memtrim

        trim = memtrim.trimmer()

    def sample() -> None:
        printed = 0
        while not done.is_set():
            n, state = live(home)
            row = (time.time(), rss_kb(), n, mlflow_seconds(), state)
            samples.append(row)
            secs = row[3] or (0.0, 0.0)
            if n is not None and n // a.every > printed:
                printed = n // a.every
                if trim is not None:
                    trim()
                print(f"ROW t={row[0] - began:7.0f} s  finished {n:5d}  driver RSS {row[1] / 1024:6.0f} MiB  "
                      f"MLflow {secs[0]:7.1f} s (loop {secs[1]:6.1f} s)  Tune state {state / 1024:8.0f} KiB",
                      flush=True)
            if tracing and n is not None and len(snaps) < 2 and n >= (a.warm, int(0.9 * a.trials))[len(snaps)]:
                import tracemalloc

                if not snaps:  # traced from the warm-up's end only: what is live at the end was allocated since
                    tracemalloc.start(10)
                snaps.append((n, tracemalloc.take_snapshot()))  # past the warm-up; near the end, before the report
            done.wait(0.5)

    overrides = ["+experiment=tiny", f"sweep.num_samples={a.trials}", f"sweep.max_concurrent_trials={a.concurrency}",
                 f"trainable.params.reports={a.reports}", "report.enabled=true"]
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
    for name, (n, secs) in sorted(CALLS.items(), key=lambda kv: -kv[1][1]):
        print(f"    MLflow {name:<28} {n:6d} calls {secs:8.1f} s", flush=True)
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(tracking_uri=out.record.tracking_uri).get_run(out.record.parent_run_id).data.metrics
    Path(os.environ["SWEEPS_BENCH_OUT"]).write_text(json.dumps({
        "samples": samples, "wall": wall, "fit": out.record.wall_s, "mlflow_s": metrics.get("sweeps/mlflow_seconds"),
        "mlflow_loop_s": metrics.get("sweeps/mlflow_loop_seconds"),
        "peak_mb": out.record.driver_peak_rss_mb, "sweep_id": out.record.sweep_id,
        "trials": out.summary.counts.get("total"), "failed": out.summary.counts.get("failed")}))


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t


def summarize(a: argparse.Namespace, got: dict[str, Any], root: Path, env: dict[str, str]) -> list[str]:
    samples = [(t, kb, n) for t, kb, n, _, _ in got["samples"] if n is not None]
    warm = next(((t, kb, n) for t, kb, n in samples if n >= a.warm), None)
    most = max((n for _, _, n in samples), default=0)
    last = next(((t, kb, n) for t, kb, n in samples if n == most), None)  # the last trial's end, not the report
    lines = [f"memory: {got['trials']} in-process trials of a tiny loop ({a.reports} report(s) with a checkpoint "
             f"each), concurrency {a.concurrency}, {got['failed']} failed; Tuner.fit {got['fit']:.0f} s "
             f"({got['fit'] / max(1, got['trials']) * 1e3:.0f} ms/trial); the driver's whole run {got['wall']:.0f} s"]
    if warm and last and last[2] > warm[2]:
        per = (last[1] - warm[1]) / (last[2] - warm[2])
        lines.append(f"  driver RSS: {warm[1] / 1024:.0f} MiB at {warm[2]} finished trials, {last[1] / 1024:.0f} MiB "
                     f"at {last[2]}: {per:+.1f} KiB per finished trial past the first {a.warm} (goal <= 50 KB)")
    else:
        lines.append(f"  driver RSS: fewer than {a.warm} trials finished while sampled; no growth figure")
    lines.append(f"  driver peak RSS until the sweep's record closed (getrusage, as the report states it): "
                 f"{got['peak_mb']:.0f} MiB")
    if got.get("mlflow_s") is not None:
        lines.append(f"  MLflow calls: {got['mlflow_s']:.1f} s of the driver's {got['wall']:.0f} s "
                     f"({got['mlflow_s'] / got['wall']:.1%}; goal <= 5%), all threads")
    if got.get("mlflow_loop_s") is not None:
        lines.append(f"  MLflow calls that held Tune's loop: {got['mlflow_loop_s']:.1f} s "
                     f"({got['mlflow_loop_s'] / got['wall']:.1%}); the rest on the tracker's writer and the model "
                     "uploads' threads")
    cli = [sys.executable, "-m", "sweeps"]
    for what, args in (("list", ["list"]), ("status", ["status", got["sweep_id"]]),
                       ("report --format md", ["report", got["sweep_id"], "--format", "md"]),
                       ("report --format md, again", ["report", got["sweep_id"], "--format", "md"]),
                       ("report (every format: md, csv, html and its plots)", ["report", got["sweep_id"]])):
        lines.append(f"  sweeps {what}: {timed([*cli, *args], env, root):.2f} s (goal < 2 s)")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5000)
    p.add_argument("--reports", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--warm", type=int, default=500)
    p.add_argument("--out", default="")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    root = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    conf = project(root)
    result = root / "result.json"
    env = {**os.environ, "SWEEPS_HOME": str(root / ".sweeps"), "SWEEPS_CONF_DIR": str(conf),
           "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]), "SWEEPS_BENCH_OUT": str(result)}
    command = (f"$ {TRACE}={os.environ.get(TRACE, '0')} python benchmarks/{Path(__file__).name} --trials {a.trials} "
               f"--concurrency {a.concurrency} --reports {a.reports} --warm {a.warm}")
    print(command, flush=True)
    rows: list[str] = []
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--trials", str(a.trials), "--reports",
           str(a.reports), "--concurrency", str(a.concurrency), "--every", str(a.every), "--warm", str(a.warm)]
    with subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        tail: list[str] = []
        for line in proc.stdout or []:
            if line.startswith(("ROW ", "  tracemalloc", "    ")):
                rows.append(line.rstrip().removeprefix("ROW "))
                print(rows[-1], flush=True)
            tail = [*tail[-40:], line]
    if not result.is_file():
        sys.exit(f"the sweep did not finish (exit {proc.returncode}):\n{''.join(tail)}")
    text = "\n".join([command, *rows, *summarize(a, json.loads(result.read_text()), root, env)])
    print("\n".join(text.splitlines()[len(rows) + 1:]))
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
