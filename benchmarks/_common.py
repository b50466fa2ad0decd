"""Shared helpers for the benchmark scripts: run the real CLI in a private SWEEPS_HOME, read the results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_cli(args: list[str], home: Path, timeout: float = 3600) -> tuple[float, dict[str, Any]]:
    """Run ``python -m sweeps run ...`` and return (wall seconds, the sweep's index record)."""
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    env = {**os.environ, "SWEEPS_HOME": str(home), "SWEEPS_CONF_DIR": str(REPO / "conf"), "RAY_TMPDIR": ray_tmp}
    before = {p.name for p in (home / "sweeps").glob("*.json")} if (home / "sweeps").is_dir() else set()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=home, env=env, capture_output=True,
                          text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    subprocess.run(["pkill", "-9", "-f", ray_tmp], check=False)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"sweeps {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (new,) = [p for p in (home / "sweeps").glob("*.json") if p.name not in before]
    return wall, json.loads(new.read_text())


def trial_rows(rec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for exp in rec["experiment_dirs"]:
        for d in Path(exp).iterdir():
            f = d / "result.json"
            if d.is_dir() and f.is_file():
                out[d.name] = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


def fixed_overheads(rec: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Per trial: start -> first reported epoch (minus that epoch's own training time), and the mean gap
    between reports beyond the training time (the per-report cost)."""
    starts, per_report = [], []
    for rows in trial_rows(rec).values():
        if not rows:
            continue
        first = rows[0]
        train = first.get("time/compute_s", 0.0) + first.get("time/data_s", 0.0)
        starts.append(first["time_total_s"] - train)
        gaps = [r["time_this_iter_s"] - r.get("time/compute_s", 0.0) - r.get("time/data_s", 0.0) for r in rows[1:]]
        if gaps:
            per_report.append(sum(gaps) / len(gaps))
    return starts, per_report


def stats(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    xs = sorted(xs)
    return f"median {xs[len(xs) // 2]:.2f} s (min {xs[0]:.2f}, max {xs[-1]:.2f}, n={len(xs)})"


# ---- helpers for overhead / efficiency / trial_overhead / asha_economy / scale (issue 11) -----------------

def median(xs: list[float]) -> float:
    """The median (the mean of the two middle values for an even count); NaN for no values."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def load_average() -> str:
    """``uptime``'s three load averages, for the figures' context."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def kill_leftovers(marker: str) -> int:
    """SIGKILL, by pid, every process of ours whose command line names ``marker`` (a private temp dir).

    The CLI and the scripts call ``ray.shutdown()``; this only catches what a crash or a timeout left behind.
    """
    import signal

    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


LAST_RUN: dict[str, Any] = {}  # of the latest run_timed call: "others" (ForeignLoad), "cpu_s" (its tree's CPU)


def become_subreaper() -> None:
    """Orphans of our runs (Ray workers whose raylet died first) become our children, so their CPU time is
    counted when we reap them (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux)."""
    import ctypes

    if not LAST_RUN.get("subreaper"):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
        LAST_RUN["subreaper"] = True


def _children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def reap_orphans(timeout_s: float = 30.0) -> None:
    """SIGKILL (by pid) what is left of a finished run among our direct children, then reap every child."""
    import signal

    deadline = time.monotonic() + timeout_s
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid():
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                pass
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def run_timed(cmd: list[str], cwd: Path, env_extra: dict[str, str] | None = None,
              timeout: float = 3600) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``cmd`` with a private RAY_TMPDIR; returns (wall seconds from spawn to exit, the process).

    Raises SystemExit with the tail of stderr when it fails. ``LAST_RUN["others"]`` then says how much CPU
    other processes (other people's sweeps and tests) took meanwhile: the figure is clean only near 0%.
    ``LAST_RUN["cpu_s"]`` is the CPU time (user + sys) of the run's whole process tree, Ray's processes
    included: unlike wall time, it hardly changes when others load the machine.
    """
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    env = {**os.environ, "SWEEPS_CONF_DIR": str(REPO / "conf"), "RAY_TMPDIR": ray_tmp, **(env_extra or {})}
    become_subreaper()
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    try:
        with ForeignLoad() as others:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        wall = time.perf_counter() - t0
        LAST_RUN["others"] = others
        kill_leftovers(ray_tmp)
        reap_orphans()
        LAST_RUN["cpu_s"] = max(others.ours_s, _children_cpu() - cpu0)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc


def run_sweeps(args: list[str], home: Path, timeout: float = 3600) -> tuple[float, dict[str, Any]]:
    """``python -m sweeps ...`` in the private SWEEPS_HOME ``home``: (wall seconds, the new index record)."""
    index = home / "sweeps"
    before = {p.name for p in index.glob("*.json")} if index.is_dir() else set()
    wall, _ = run_timed([sys.executable, "-m", "sweeps", *args], home, {"SWEEPS_HOME": str(home)}, timeout)
    (new,) = [p for p in index.glob("*.json") if p.name not in before]
    return wall, json.loads(new.read_text())


def trial_timeline(exp_dir: str | Path) -> list[dict[str, Any]]:
    """Per trial, from Tune's experiment state (driver clock): ``start`` (trial actor started, status set
    RUNNING), ``last`` (driver received its last result), ``status``, and ``rows`` (its result.json).

    ``first`` (driver received the first result) is derived: ``last - (time_total_s[-1] - time_total_s[0])``;
    ``time_total_s`` adds up the gaps between the trainable's reports, measured in the trial actor.
    """
    states = sorted(Path(exp_dir).glob("experiment_state-*.json"))
    if not states:
        return []
    out = []
    for trial_json, meta_json in json.loads(states[-1].read_text())["trial_data"]:
        trial, meta = json.loads(trial_json), json.loads(meta_json)
        result = Path(exp_dir) / trial.get("relative_logdir", "") / "result.json"
        if not result.is_file():
            hits = list(Path(exp_dir).glob(f"*{trial['trial_id']}*/result.json"))
            result = hits[0] if hits else result
        lines = result.read_text().splitlines() if result.is_file() else []
        rows = [json.loads(x) for x in lines if x.strip()]
        span = rows[-1]["time_total_s"] - rows[0]["time_total_s"] if rows else 0.0
        first = meta["last_result_time"] - span if rows else None
        out.append({"trial_id": trial["trial_id"], "status": trial.get("status"), "start": meta["start_time"],
                    "first": first, "last": meta["last_result_time"] if rows else None, "rows": rows})
    return sorted(out, key=lambda t: t["start"] or 0.0)


def experiment_start(exp_dir: str | Path) -> float | None:
    """When Tune's loop started (driver clock), from the experiment state's ``stats``."""
    states = sorted(Path(exp_dir).glob("experiment_state-*.json"))
    return json.loads(states[-1].read_text())["stats"]["start_time"] if states else None


def mlflow_trial_runs(rec: dict[str, Any]) -> dict[str, tuple[float, float | None]]:
    """``{trial_id: (start_s, end_s)}`` of a sweep's child runs: created in the tracking callback's
    ``on_trial_start``, ended (``set_terminated``) in ``on_trial_complete`` after its final writes."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=rec["tracking_uri"])
    parent = f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'"
    runs = c.search_runs([rec["mlflow_experiment_id"]], filter_string=parent, max_results=5000)
    return {r.data.tags.get("sweeps.trial_id", r.info.run_id): (r.info.start_time / 1000,
            r.info.end_time / 1000 if r.info.end_time else None) for r in runs}


class ForeignLoad:
    """Context manager: CPU seconds used by processes *outside* this process's tree while it is open.

    Samples ``/proc/*/stat`` every ``period_s``; a process is ours when this process is among its ancestors
    (Ray's raylet, workers and trial actors descend from the driver we spawned). ``share`` is the foreign
    CPU time over the machine's capacity (cores x seconds): near 0 means the figures are clean. ``ours_s``
    is the CPU time of this process's descendants (sampled: the last ``period_s`` of each process is lost).
    ``getrusage(RUSAGE_CHILDREN)`` is no substitute: it missed about a third of a Ray run's CPU time here
    (children reaped by a parent that ignores SIGCHLD are never accounted).
    """

    def __init__(self, period_s: float = 0.5) -> None:
        import threading

        self.period_s = period_s
        self.cpu_s = 0.0
        self.ours_s = 0.0
        self.wall_s = 0.0
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._mine: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def _snapshot(self) -> dict[int, tuple[int, float]]:
        out = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[int(proc.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / self._tick)
        return out

    def _foreign(self, snap: dict[int, tuple[int, float]]) -> dict[int, float]:
        """CPU seconds by pid, of every process but this one; notes which are ours (descendants)."""
        me, out = os.getpid(), {}
        for pid, (ppid, cpu) in snap.items():
            p, seen = ppid, 0
            while p not in (0, 1, me) and p in snap and seen < 64:
                p, seen = snap[p][0], seen + 1
            if pid == me:
                continue
            if p == me:
                self._mine.add(pid)
            out[pid] = cpu
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._record(self._foreign(self._snapshot()))

    def _record(self, cpu: dict[int, float]) -> None:
        for pid, c in cpu.items():
            self._first.setdefault(pid, c if self._started else 0.0)
            self._last[pid] = c

    def __enter__(self) -> ForeignLoad:
        self._t0 = time.perf_counter()
        self._started = True
        self._record(self._foreign(self._snapshot()))
        self._started = False  # processes first seen later started during the window: count from 0
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._record(self._foreign(self._snapshot()))
        self.wall_s = time.perf_counter() - self._t0
        used = {p: self._last[p] - self._first[p] for p in self._last}
        self.cpu_s = sum(v for p, v in used.items() if p not in self._mine)
        self.ours_s = sum(v for p, v in used.items() if p in self._mine)

    @property
    def share(self) -> float:
        return self.cpu_s / max(self.wall_s * (os.cpu_count() or 1), 1e-9)

    def __str__(self) -> str:
        return f"others {self.cpu_s:.0f} CPU-s ({self.share:.0%} of the machine)"


# (module, function) pairs of the `sweeps run` pipeline, timed by phase_timers(), in pipeline order.
SWEEPS_PHASES = (
    ("sweeps.ops.prepare", "prepare"), ("sweeps.tracking.client", "probe"),
    ("sweeps.execution.resources.storage", "check_storage"), ("sweeps.tracking.client", "client"),
    ("sweeps.tracking.client", "close_stale_runs"), ("sweeps.execution.cluster.raystart", "start"),
    ("sweeps.ops.run", "open_parent"), ("sweeps.ops.run", "make_tracker"),
    ("sweeps.execution.tuning.tuner", "build_tuner"),
    ("sweeps.ops.run", "_records"), ("sweeps.reports.summary", "collect"), ("sweeps.ops.run", "finish_parent"),
    ("sweeps.ops.run", "_report"), ("sweeps.execution.cluster.raystart", "stop"),
)


def phase_timers() -> dict[str, list[float]]:
    """Wrap the pipeline's functions (module attributes, looked up at call time) with timers.

    Also times the Tuner's ``fit`` and the tracker's ``close_open``. Returns the dict the timings land in
    (seconds per call, by ``module.function``); ``tracker`` holds the tracking callback for its MLflow timer.
    """
    import functools
    import importlib

    out: dict[str, list[float]] = {}

    def timed(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                out.setdefault(name, []).append(time.perf_counter() - t)
        return wrapper

    for module, attr in SWEEPS_PHASES:
        mod = importlib.import_module(module)
        name = f"{module.rsplit('.', 1)[1]}.{attr}"
        fn = timed(name, getattr(mod, attr))
        if attr == "build_tuner":
            inner = fn

            def build(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
                tuner = _inner(*args, **kwargs)
                tuner.fit = timed("Tuner.fit", tuner.fit)
                return tuner
            fn = build
        elif attr == "make_tracker":
            inner_t = fn

            def make(*args: Any, _inner: Any = inner_t, **kwargs: Any) -> Any:
                tracker = _inner(*args, **kwargs)
                tracker.close_open = timed("tracker.close_open", tracker.close_open)
                out["tracker"] = [tracker]  # type: ignore[list-item]
                return tracker
            fn = make
        setattr(mod, attr, fn)
    return out
