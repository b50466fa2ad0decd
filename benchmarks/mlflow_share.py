"""Share of sweep wall time spent in MLflow calls, for the 12-trial digits_asha sweep (goal: <= 5%).

Usage: python benchmarks/mlflow_share.py [--timeout S] [override ...]     (e.g. sweep.num_samples=4)
Runs ``python -m sweeps run +experiment=digits_asha [overrides]`` with the default embedded SQLite store
in a private SWEEPS_HOME, then reads the parent run's ``sweeps/mlflow_seconds`` (time the driver's tracking
callback spent in MLflow calls) and ``sweeps/wall_s`` (the sweep's ``Tuner.fit`` wall time), both logged
by ``sweeps.ops.run``. Takes ~5 minutes on 2 idle cores. After ``--timeout`` seconds (default 1800) or on
Ctrl-C the sweep is interrupted gracefully (SIGINT) and the share of the part that ran is reported.
Exit code 1 when the share is above the goal or the sweep left no parent run to read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOAL = 0.05


def run_sweep(overrides: list[str], home: Path, timeout_s: float) -> tuple[float, int | None]:
    """Run the sweep in its own process group; SIGINT it after ``timeout_s``. Returns (wall s, exit code)."""
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # unix sockets need short paths
    env = {**os.environ, "SWEEPS_HOME": str(home), "SWEEPS_CONF_DIR": str(REPO / "conf"), "RAY_TMPDIR": ray_tmp}
    cmd = [sys.executable, "-m", "sweeps", "run", "+experiment=digits_asha", *overrides]
    t0 = time.perf_counter()
    with (home / "sweep.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            print(f"interrupting the sweep after {time.perf_counter() - t0:.0f} s (SIGINT) ...", flush=True)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # Ray processes the driver left in its group, if any
            shutil.rmtree(ray_tmp, ignore_errors=True)
    return time.perf_counter() - t0, proc.returncode


def sweep_record(home: Path) -> dict[str, Any] | None:
    import json

    found = sorted((home / "sweeps").glob("*.json"))
    return json.loads(found[-1].read_text()) if found else None


def parent_metrics(rec: dict[str, Any]) -> tuple[dict[str, float], list[str]]:
    """The parent run's metrics and the statuses of its child runs."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=rec["tracking_uri"])
    parent = c.get_run(rec["parent_run_id"])
    children = c.search_runs([rec["mlflow_experiment_id"]],
                             filter_string=f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'",
                             max_results=1000)
    return dict(parent.data.metrics), [r.info.status for r in children]


def report(rec: dict[str, Any], metrics: dict[str, float], statuses: list[str], cli_wall: float,
           overrides: list[str]) -> float:
    """Print the figures; return the share."""
    mlflow_s, wall_s = metrics["sweeps/mlflow_seconds"], metrics["sweeps/wall_s"]
    share = mlflow_s / wall_s
    c = rec["counts"]
    partial = "" if rec["status"] == "finished" else f" [{rec['status'].upper()}: figures cover the part that ran]"
    print(f"digits_asha {rec['sweep_id']} ({' '.join(overrides) or 'no overrides'}){partial}")
    print(f"  trials: {c['total']} ({c['completed']} completed, {c['early_stopped']} early-stopped, "
          f"{c['failed']} failed, {c['unfinished']} unfinished); MLflow store {rec['tracking_uri']}")
    by_status = ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses)))
    print(f"  child runs: {len(statuses)} ({by_status})")
    print(f"  sweep wall time (Tuner.fit): {wall_s:.1f} s; CLI start to exit: {cli_wall:.1f} s")
    print(f"  MLflow calls in the tracking callback: {mlflow_s:.2f} s")
    verdict = "OK" if share <= GOAL else "ABOVE GOAL"
    print(f"  share of sweep wall time in MLflow: {share:.2%} (goal <= {GOAL:.0%}): {verdict}")
    return share


def main(argv: list[str]) -> int:
    timeout_s = 1800.0
    if argv[:1] == ["--timeout"] and len(argv) > 1:
        timeout_s, argv = float(argv[1]), argv[2:]
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-share-") as d:
        home = Path(d)
        cli_wall, code = run_sweep(argv, home, timeout_s)
        rec = sweep_record(home)
        if rec is None or not rec.get("parent_run_id"):
            tail = (home / "sweep.log").read_text(errors="replace")[-3000:]
            print(f"the sweep (exit {code}) left no parent run to read:\n{tail}")
            return 1
        metrics, statuses = parent_metrics(rec)
        if "sweeps/mlflow_seconds" not in metrics or "sweeps/wall_s" not in metrics:
            print(f"the parent run has no sweeps/mlflow_seconds or sweeps/wall_s (exit {code}): {metrics}")
            return 1
        share = report(rec, metrics, statuses, cli_wall, argv)
    return 0 if share <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
