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
