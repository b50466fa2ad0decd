"""Where a trial's start-up goes, in a profile: py-spy over a whole sweep, and a timeline of every Ray process.

Runs one small sweep (2-worker trials, FIFO) under ``py-spy record --subprocesses --idle`` (wall-clock samples of
every thread of the driver and of every process Ray starts under it), with ``PYTHONPROFILEIMPORTTIME=1`` (each
Ray worker process writes its import timings to its log) and ``$SWEEPS_STAGE_LOG`` (each trial's stage stamps,
with the pids of its trial actor, Train controller and workers). Meanwhile this script reads ``/proc`` every
0.1 s: each process's title (Ray renames a worker ``ray::IDLE`` when it registers, then after the actor it
hosts) and its CPU seconds. Printed:

- each trial's start-up stages (``startup/<stage>_s``, the orchestrator's figures) and stamps;
- for each process a trial start took (trial actor, controller, workers): its age, when it was leased (its
  title left ``ray::IDLE``), the CPU it burnt in the second before that (a process still importing its
  preload) and from its lease to its actor's first stamp: so whether the controller's ``ray.get`` on its
  workers waits on processes still warming up;
- the CPU of every process during each start, by role (this trial's, idle pool processes, other trials', the
  driver, Ray's daemons): what competes with the start on the cores;
- per kind of process, the sampled seconds by activity (importing, Ray's own calls, torch / the loop, waiting);
- the slowest top-level imports of the Train worker processes (``PYTHONPROFILEIMPORTTIME``, median).

The profile (py-spy's folded stacks, pruned to stacks of at least ``--min-samples`` samples) and the summary
land in ``--out`` (default benchmarks/results/: ``startup_profile.folded.txt``, ``startup_profile.txt``).

    python benchmarks/startup_profile.py [--trials 2] [--workers 2] [--concurrency 1] [--rate 20]

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
import threading
import time
from pathlib import Path
from typing import Any

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
EVERY_S = 0.1
TICK = os.sysconf("SC_CLK_TCK")


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


def short(frame: str) -> str:
    """A frame without its long paths: a process named by its program (not its whole command line), a function
    by its package-relative file."""
    if frame.startswith("process "):
        pid, _, cmd = frame[len("process "):].partition(":")
        words = cmd.strip('"').split()
        first = Path(words[0]).name if words else "?"
        program = next((Path(w).name for w in words if w.endswith(".py")), first) if first.startswith("python") \
            else first
        return f"process {pid}:{program}"
    return re.sub(r"\(/\S*?/(site-packages|lib/python3\.\d+|work/main)/", "(", frame)


def prune(raw: Path, min_samples: int) -> int:
    """Keep the stacks sampled at least ``min_samples`` times, their frames shortened (the file stays small);
    returns how many."""
    kept = []
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit() and int(count) >= min_samples:
            kept.append(";".join(short(f) for f in stack.split(";")) + " " + count)
    raw.write_text("\n".join(kept) + "\n")
    return len(kept)


def session_logs(ray_tmp: Path) -> list[str]:
    """Ray's worker logs: ``$RAY_TMPDIR/ray/session_*/logs`` (Ray 2.60), or ``$RAY_TMPDIR/session_*/logs``."""
    return [p for pattern in ("ray/session_*/logs/worker-*.err", "session_*/logs/worker-*.err")
            for p in glob.glob(str(ray_tmp / pattern))]


def imports(ray_tmp: Path, limit: int = 8) -> tuple[int, list[tuple[str, float]]]:
    """(Train worker processes found, their slowest top-level imports: median cumulative seconds). A Train
    worker's log names its actor (``:actor_name:RayTrainWorker``)."""
    per_module: dict[str, list[float]] = collections.defaultdict(list)
    found = 0
    for path in session_logs(ray_tmp):
        text = Path(path).read_text(errors="replace")
        if ":actor_name:RayTrainWorker" not in text:
            continue
        found += 1
        for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", text, re.M):
            per_module[m.group(2).rstrip()].append(int(m.group(1)) / 1e6)
    rows = [(name, sorted(v)[len(v) // 2]) for name, v in per_module.items()]
    return found, sorted(rows, key=lambda r: -r[1])[:limit]


# ---- the /proc timeline -------------------------------------------------------------------------------------

def descendants(root: int) -> dict[int, tuple[int, str, float, float]]:
    """{pid: (parent, title, CPU seconds, start time)} of ``root``'s process tree."""
    boot = next(float(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime"))
    procs: dict[int, tuple[int, str, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except (OSError, IndexError):
            continue
        procs[int(entry)] = (int(fields[1]), title, (int(fields[11]) + int(fields[12])) / TICK,
                             boot + int(fields[19]) / TICK)
    keep, frontier = {}, {root}
    while frontier:
        frontier = {pid for pid, row in procs.items() if row[0] in frontier and pid not in keep}
        keep.update({pid: procs[pid] for pid in frontier})
    return keep


class Timeline:
    """Samples ``/proc`` for a process tree until stopped: ``rows`` of (time, pid, title, CPU seconds)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.rows: list[tuple[float, int, str, float]] = []
        self.started: dict[int, float] = {}
        self.parent: dict[int, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            for pid, (parent, title, cpu, born) in descendants(self.root).items():
                self.rows.append((now, pid, title, cpu))
                self.started.setdefault(pid, born)
                self.parent.setdefault(pid, parent)
            self.stop.wait(EVERY_S)

    def of(self, pid: int) -> list[tuple[float, str, float]]:
        return [(t, title, cpu) for t, p, title, cpu in self.rows if p == pid]

    def cpu_between(self, pid: int, t0: float, t1: float) -> float:
        rows = self.of(pid)
        before = [cpu for t, _, cpu in rows if t <= t0]
        after = [cpu for t, _, cpu in rows if t <= t1]
        return (after[-1] if after else 0.0) - (before[-1] if before else 0.0)

    def leased(self, pid: int) -> float | None:
        """When the process left ``ray::IDLE`` (or first showed an actor's title)."""
        was_idle = False
        for t, title, _ in self.of(pid):
            if title.startswith("ray::IDLE"):
                was_idle = True
            elif title.startswith("ray::") and (was_idle or not title.startswith("ray::IDLE")):
                return t
        return None


def role(title: str) -> str:
    if title.startswith("ray::IDLE") or "default_worker.py" in title:
        return "idle / starting pool processes"
    if title.startswith("ray::"):
        return "other actors (other trials, Train's helpers)"
    if "sweeps" in title or title.endswith("python"):
        return "the driver"
    return "Ray's daemons (raylet, GCS, ...)"


def start_report(tl: Timeline, stamps: list[dict[str, Any]], driver: int) -> list[str]:
    """Per trial start: the processes it took (age, lease, CPU before and after the lease), and everyone's CPU
    during the start, by role."""
    lines: list[str] = []
    by_trial: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for s in stamps:
        by_trial[s["trial"]].setdefault(s["stage"] if s["stage"] != "loop_start" else f"loop_start{s.get('rank')}",
                                        s)
    for trial, st in by_trial.items():
        if "trial_up" not in st or "first_report" not in st:
            continue
        t0, t1 = st["trial_up"]["t"], st["first_report"]["t"]
        lines.append(f"  trial {trial}: trial_up -> first_report {t1 - t0:.2f} s; stamps (s after trial_up): "
                     + ", ".join(f"{k} {v['t'] - t0:.2f}" for k, v in sorted(st.items(), key=lambda kv: kv[1]["t"])
                                 if k != "train_log"))
        took = {"trial actor": st["trial_up"]["pid"]}
        if "controller_up" in st:
            took["controller"] = st["controller_up"]["pid"]
        for i, pid in enumerate(st.get("workers_up", {}).get("pids") or []):
            took[f"worker {i}"] = pid
        ups = {"trial actor": t0, "controller": st.get("controller_up", {}).get("t"),
               **{f"worker {i}": st.get("workers_up", {}).get("t") for i in range(len(took))}}
        for name, pid in took.items():
            lease = tl.leased(pid)
            born = tl.started.get(pid)
            up = ups.get(name) or t1
            if lease is None:
                lines.append(f"    {name:<12} pid {pid}: not seen leased (a fresh process, or between samples)")
                continue
            lines.append(f"    {name:<12} pid {pid}: age at lease {lease - born if born else float('nan'):.1f} s, "
                         f"leased {lease - t0:+.2f} s; CPU in the 1 s before the lease "
                         f"{tl.cpu_between(pid, lease - 1.0, lease):.2f} s (busy = still warming up), "
                         f"from lease to up {up - lease:.2f} s wall, {tl.cpu_between(pid, lease, up):.2f} s CPU")
        cpu: collections.Counter[str] = collections.Counter()
        mine = set(took.values())
        for pid in {p for _, p, _, _ in tl.rows}:
            title = next((title for _, title, _ in reversed(tl.of(pid))), "")
            used = tl.cpu_between(pid, t0, t1)
            name = ("this trial's processes" if pid in mine else "the driver" if pid == driver
                    else role(title))
            cpu[name] += used
        lines.append(f"    CPU seconds during its start ({t1 - t0:.2f} s wall x 2 cores here): "
                     + ", ".join(f"{k} {v:.2f}" for k, v in cpu.most_common()))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--rate", type=int, default=20, help="samples per second per thread")
    p.add_argument("--min-samples", type=int, default=3, help="folded stacks kept: sampled at least this often")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "startup_profile.folded.txt"
    stamp_log = work / "stages.jsonl"
    env = {**os.environ, "SWEEPS_HOME": str(work / ".sweeps"), "RAY_TMPDIR": str(ray_tmp),
           "PYTHONPROFILEIMPORTTIME": "1", "SWEEPS_CONSOLE": "file", "SWEEPS_STAGE_LOG": str(stamp_log),
           "PYTHONPATH": str(REPO)}
    sweep = [sys.executable, "-m", "sweeps", "run", "+experiment=quickstart", "scheduler=fifo",
             f"sweep.num_samples={a.trials}", f"sweep.max_concurrent_trials={a.concurrency}",
             f"trainable.num_workers={a.workers}", "trainable.params.epochs=2", "report.enabled=false"]
    cmd = [spy, "record", "--subprocesses", "--idle", "--nonblocking", "--format", "raw", "--rate", str(a.rate),
           "-o", str(raw), "--", *sweep]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tl = Timeline(proc.pid)
    stdout, stderr = proc.communicate()
    tl.stop.set()
    tl.thread.join()
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not raw.is_file():
        sys.exit(f"py-spy/sweep failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}")
    driver = next((pid for pid, parent in tl.parent.items() if parent == proc.pid), proc.pid)  # py-spy's child
    stamps = [json.loads(x) for x in stamp_log.read_text().splitlines() if x.strip()] if stamp_log.is_file() else []
    lines = [f"$ python benchmarks/startup_profile.py --trials {a.trials} --workers {a.workers} --concurrency "
             f"{a.concurrency} --rate {a.rate}",
             f"$ {' '.join(cmd[:9])} ... -- python -m sweeps {' '.join(sweep[3:])}",
             f"sweep under py-spy: {wall:.0f} s wall", "", "start-up stages per trial (s, the orchestrator's):"]
    for f in sorted(glob.glob(str(work / ".sweeps" / "ray" / "*" / "*" / "result.json"))):
        first = json.loads(Path(f).read_text().splitlines()[0])
        stages = {k.split("/")[1][:-2]: v for k, v in first.items() if k.startswith("startup/") and k.endswith("_s")}
        lines.append("  " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    lines += ["", "each start: the processes it took, and who used the CPU meanwhile (/proc every 0.1 s):"]
    lines += start_report(tl, stamps, driver)
    lines += ["", "sampled seconds by process kind and activity (py-spy, all threads, wall clock):"]
    for kind, acts in sorted(aggregate(raw, a.rate).items()):
        n = int(acts.pop("processes"))
        lines.append(f"  {kind:<18} ({n} processes) " + ", ".join(f"{k} {v:.1f}" for k, v in acts.most_common()))
    found, slowest = imports(ray_tmp)
    lines += ["", f"slowest top-level imports of the Train worker processes ({found} logs; median, cumulative s):"]
    lines += [f"  {name:<40} {secs:.2f}" for name, secs in slowest]
    kept = prune(raw, a.min_samples)
    lines.append(f"\nprofile: {raw.name} ({kept} stacks of >= {a.min_samples} samples at {a.rate}/s)")
    text = "\n".join(lines)
    print(text)
    (out / "startup_profile.txt").write_text(text + "\n")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
