"""Share of sweep wall time spent in MLflow calls, for the 12-trial digits_asha sweep (goal: <= 5%).

Usage: python benchmarks/mlflow_share.py [override ...]     (e.g. sweep.num_samples=4)
Runs ``python -m sweeps run +experiment=digits_asha [overrides]`` with the default embedded SQLite store
in a private SWEEPS_HOME, then reads the parent run's ``sweeps/mlflow_seconds`` (time the driver's tracking
callback spent in MLflow calls) and ``sweeps/wall_s`` (the sweep's ``Tuner.fit`` wall time), both logged
by ``sweeps.runner``. Takes ~5 minutes on 2 cores. Exit code 1 when the share is above the goal.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_cli  # noqa: E402

GOAL = 0.05


def parent_metrics(rec: dict[str, Any]) -> tuple[dict[str, float], list[str]]:
    """The parent run's metrics and the statuses of its child runs."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=rec["tracking_uri"])
    parent = c.get_run(rec["parent_run_id"])
    children = c.search_runs([rec["mlflow_experiment_id"]],
                             filter_string=f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'",
                             max_results=1000)
    return dict(parent.data.metrics), [r.info.status for r in children]


def main(overrides: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-share-") as d:
        cli_wall, rec = run_cli(["run", "+experiment=digits_asha", *overrides], Path(d))
        metrics, statuses = parent_metrics(rec)
    mlflow_s, wall_s = metrics["sweeps/mlflow_seconds"], metrics["sweeps/wall_s"]
    share = mlflow_s / wall_s
    c = rec["counts"]
    print(f"digits_asha {rec['sweep_id']} ({' '.join(overrides) or 'no overrides'}): {c['total']} trials "
          f"({c['early_stopped']} early-stopped, {c['failed']} failed); MLflow store {rec['tracking_uri']}")
    by_status = ", ".join(f"{s} {statuses.count(s)}" for s in sorted(set(statuses)))
    print(f"  child runs: {len(statuses)} ({by_status})")
    print(f"  sweep wall time (Tuner.fit): {wall_s:.1f} s; CLI start to exit: {cli_wall:.1f} s")
    print(f"  MLflow calls in the tracking callback: {mlflow_s:.2f} s")
    verdict = "OK" if share <= GOAL else "ABOVE GOAL"
    print(f"  share of sweep wall time in MLflow: {share:.2%} (goal <= {GOAL:.0%}): {verdict}")
    return 0 if share <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
