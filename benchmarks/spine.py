"""Wall time of the quickstart and of the 12-trial digits_asha sweep, and the per-trial fixed overhead.

Usage: python benchmarks/spine.py [quickstart|digits_asha|all]
Prints: wall time of each sweep (CLI start to exit), trials, and per trial: start -> first reported epoch.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fixed_overheads, run_cli, stats  # noqa: E402

SWEEPS = {
    "quickstart": ["run", "+experiment=quickstart"],
    "digits_asha": ["run", "+experiment=digits_asha", "sweep.num_samples=12"],
}


def mlflow_share(rec: dict) -> float:
    """Seconds the tracking callback spent in MLflow calls over the sweep's wall time (parent-run metrics)."""
    from mlflow.tracking import MlflowClient

    m = MlflowClient(rec["tracking_uri"]).get_run(rec["parent_run_id"]).data.metrics
    return m["sweeps/mlflow_seconds"] / m["sweeps/wall_s"]


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    names = list(SWEEPS) if which == "all" else [which]
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as d:
            wall, rec = run_cli(SWEEPS[name], Path(d))
            starts, per_report = fixed_overheads(rec)
            c = rec["counts"]
            print(f"{name}: wall {wall:.1f} s (sweep {rec['wall_s']:.1f} s); trials {c['total']} "
                  f"({c['early_stopped']} early-stopped, {c['failed']} failed); best {rec['metric']} = "
                  f"{rec['best'].get('value', float('nan')):.4f}")
            print(f"  per-trial start -> first epoch: {stats(starts)}")
            print(f"  MLflow share of sweep wall time: {mlflow_share(rec):.2%}")
            print(f"  per-report overhead beyond training: {stats(per_report)}")


if __name__ == "__main__":
    main()
