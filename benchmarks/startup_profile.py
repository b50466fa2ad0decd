"""Where a trial's start-up goes, in a profile: py-spy over a whole sweep (every process of the embedded Ray).

Runs one small sweep (2-worker trials, one at a time, FIFO) under ``py-spy record --subprocesses --idle``
(wall-clock samples of every thread of the driver and of every process Ray starts under it) and
``PYTHONPROFILEIMPORTTIME=1`` (each Ray worker process writes its import timings to its log). Prints:

- the sweep's own start-up stages per trial (``startup/<stage>_s``, the orchestrator's figures);
- per kind of process (the driver; Tune's trial actor; Train's controller; Train's workers; idle pool
  processes), the sampled seconds by what the process was doing: importing (any frame under Python's import
  machinery), Ray's own calls (under ``ray/``, not importing), torch / the user's loop, or waiting;
- the slowest top-level imports of the Train worker processes (``PYTHONPROFILEIMPORTTIME``, cumulative).

The raw profile (folded stacks) and the import log land in ``--out`` (default benchmarks/results/).

    python benchmarks/startup_profile.py [--trials 2] [--workers 2] [--rate 50] [--out benchmarks/results]

Needs py-spy (``pip install py-spy``) and permission to ptrace the processes (root, or ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# a process's kind, by what its samples ran (py-spy keeps the command line a process started with, before Ray
# renames it after the actor it hosts): the first marker found in any of its stacks
KINDS = (("train worker", ("worker_group/worker.py", "train_fn_utils", "seeded_loop")),
         ("train controller", ("controller/controller.py",)),
         ("trial actor", ("function_trainable.py", "execution/train/trial.py")),
         ("driver", ("sweeps/cli/", "sweeps/__main__.py")))
IMPORTING = ("_find_and_load", "_load_unlocked", "exec_module", "_call_with_frames_removed")
WAITING = ("wait (", "select (", "poll (", "sleep (", "recv (", "acquire (", "epoll", "main_loop (",
           "get_objects (", "run_task_loop")


def kind_of(cmdline: str, stacks: str) -> str:
    for label, needles in KINDS:
        if any(n in stacks for n in needles):
            return label
    return "idle pool process" if "default_worker.py" in cmdline else "other Ray process"


def doing(frames: list[str]) -> str:
    text = ";".join(frames)
    if any(f in text for f in IMPORTING):
        return "importing"
    leaf = frames[-1] if frames else ""
    if any(w in leaf for w in WAITING) or "idle" in leaf:
        return "waiting"
    if "/torch/" in text or "trainables/" in text:
        return "torch / the loop"
    if "/ray/" in text:
        return "Ray's own calls"
    return "other Python"


def aggregate(raw: Path, rate: int) -> dict[str, collections.Counter[str]]:
    """{process kind: {activity: seconds}} from py-spy's raw (folded) output, whose leading frames name the
    process and its parents (``process PID:"command line"``)."""
    samples: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]  # parent, child, ...: the last is this one
        proc = procs[-1] if procs else "process ?"
        samples[proc].append(([f for f in frames if not f.startswith(("process ", "thread "))], int(count)))
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for proc, rows in samples.items():
        kind = kind_of(proc, ";".join(";".join(frames) for frames, _ in rows))
        for frames, count in rows:
            out[kind][doing(frames)] += count / rate
        out[kind]["processes"] += 1 / rate  # counted back below
    for acts in out.values():
        acts["processes"] = round(acts["processes"] * rate)
    return out


def imports(ray_tmp: Path, limit: int = 8) -> list[tuple[str, float]]:
    """The slowest top-level imports (cumulative, seconds), median over the Train worker processes' logs."""
    per_module: dict[str, list[float]] = collections.defaultdict(list)
    for path in glob.glob(str(ray_tmp / "session_*" / "logs" / "worker-*.err")):
        text = Path(path).read_text(errors="replace")
        if "RayTrainWorker" not in text and "train" not in text:
            continue
        for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", text, re.M):
            name = m.group(2).rstrip()
            if not name.startswith(" "):  # top level only
                per_module[name].append(int(m.group(1)) / 1e6)
    rows = [(name, sorted(v)[len(v) // 2]) for name, v in per_module.items()]
    return sorted(rows, key=lambda r: -r[1])[:limit]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rate", type=int, default=50, help="samples per second per thread")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "startup_profile.folded.txt"
    env = {**os.environ, "SWEEPS_HOME": str(work / ".sweeps"), "RAY_TMPDIR": str(ray_tmp),
           "PYTHONPROFILEIMPORTTIME": "1", "SWEEPS_CONSOLE": "file"}
    sweep = [sys.executable, "-m", "sweeps", "run", "+experiment=quickstart", "scheduler=fifo",
             f"sweep.num_samples={a.trials}", "sweep.max_concurrent_trials=1", f"trainable.num_workers={a.workers}",
             "trainable.params.epochs=2", "report.enabled=false"]
    cmd = [spy, "record", "--subprocesses", "--idle", "--format", "raw", "--rate", str(a.rate), "-o", str(raw),
           "--", *sweep]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not raw.is_file():
        sys.exit(f"py-spy/sweep failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    lines = [f"$ python benchmarks/startup_profile.py --trials {a.trials} --workers {a.workers} --rate {a.rate}",
             f"sweep under py-spy: {wall:.0f} s wall ({' '.join(sweep[2:])})", "", "start-up stages per trial (s):"]
    for f in sorted(glob.glob(str(work / ".sweeps" / "ray" / "*" / "run_*" / "result.json"))):
        first = json.loads(Path(f).read_text().splitlines()[0])
        stages = {k.split("/")[1][:-2]: v for k, v in first.items() if k.startswith("startup/")}
        lines.append("  " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    lines += ["", "sampled seconds by process kind and activity (all threads, wall clock):"]
    for kind, acts in sorted(aggregate(raw, a.rate).items()):
        n = int(acts.pop("processes"))
        lines.append(f"  {kind:<18} ({n} processes) " + ", ".join(f"{k} {v:.1f}" for k, v in acts.most_common()))
    lines += ["", "slowest top-level imports of a Ray worker process (median, cumulative s):"]
    lines += [f"  {name:<40} {secs:.2f}" for name, secs in imports(ray_tmp)]
    text = "\n".join(lines)
    print(text)
    (out / "startup_profile.txt").write_text(text + "\n")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
