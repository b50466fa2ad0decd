"""Ray Data's two Parquet readers under a sweep: the same wine sweep with ``reader=classic`` and ``ray_default``.

``trainables/tabular_data.py`` reads with Ray Data's classic Parquet reader unless ``data.reader=ray_default``.
Ray's default (``DataContext.use_datasource_v2``) starts a pool of footer-reading actors for every execution:
every epoch of every trial. Runs both sweeps back to back in one process (the machine's noise hits both),
prints each wall time and the ratio.

    python benchmarks/ray_data_reader.py [--trials 2] [--epochs 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_cli  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    return p.parse_args()


def sweep(reader: str, args: argparse.Namespace) -> tuple[float, float]:
    home = Path(tempfile.mkdtemp(prefix="rdr"))
    try:
        lrs = ", ".join(str(0.01 * (i + 1)) for i in range(args.trials))
        wall, rec = run_cli(["run", "+experiment=wine_data", "sweep.num_samples=1", "scheduler=fifo",
                             f"search_space.lr={{dist: grid, values: [{lrs}]}}",
                             f"trainable.num_workers={args.workers}", f"trainable.params.epochs={args.epochs}",
                             f"trainable.params.data.reader={reader}", "report.enabled=false"], home)
        assert rec["counts"]["completed"] == args.trials, rec["counts"]
        return wall, float(rec["wall_s"])
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    args = parse_args()
    out = {reader: sweep(reader, args) for reader in ("classic", "ray_default")}
    for reader, (wall, sweep_s) in out.items():
        print(f"reader={reader:<12} command wall {wall:6.1f} s   sweep wall (record) {sweep_s:6.1f} s")
    print(f"ray_default / classic (command wall): {out['ray_default'][0] / out['classic'][0]:.2f}x "
          f"({args.trials} trial(s) x {args.epochs} epoch(s), {args.workers} worker(s) each)")


if __name__ == "__main__":
    main()
