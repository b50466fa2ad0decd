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


def run_timed(cmd: list[str], cwd: Path, env_extra: dict[str, str] | None = None,
              timeout: float = 3600) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run ``cmd`` with a private RAY_TMPDIR; returns (wall seconds from spawn to exit, the process).

    Raises SystemExit with the tail of stderr when it fails.
    """
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    env = {**os.environ, "SWEEPS_CONF_DIR": str(REPO / "conf"), "RAY_TMPDIR": ray_tmp, **(env_extra or {})}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        wall = time.perf_counter() - t0
        kill_leftovers(ray_tmp)
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
