"""ASHA against full-budget random search on digits: same trials, same seed (so the same sampled configs).

Both run ``+experiment=digits_asha`` (the digits space, 2 Train workers, concurrency 2); the random search
with ``scheduler=fifo``. Prints each sweep's best val/acc and the epochs it trained (rows in the trials'
result.json), and the ratios. Goal: ASHA >= 99% of random's best with <= 1/3 of its epochs. ASHA is
asynchronous: which trials it stops depends on the order results arrive, so repeat with several seeds.

    python benchmarks/asha_economy.py [--trials 12] [--epochs 12] [--seeds 0 1 2] [--sweeps-arg KEY=VALUE ...]
        [--asha-arg KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LAST_RUN, load_average, run_sweeps, trial_rows  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--sweeps-arg", action="append", default=[], help="extra override for both sweeps")
    p.add_argument("--asha-arg", action="append", default=[],
                   help="extra override for the ASHA sweep only (e.g. scheduler.reduction_factor=3)")
    return p.parse_args()


def sweep(scheduler: str, seed: int, a: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"bench-asha-{scheduler}-"))
    try:
        wall, rec = run_sweeps(["run", "+experiment=digits_asha", f"scheduler={scheduler}",
                                f"sweep.num_samples={a.trials}", f"trainable.params.epochs={a.epochs}",
                                f"sweep.seed={seed}", *a.sweeps_arg,
                                *(a.asha_arg if scheduler == "asha" else [])], home)
        rows = trial_rows(rec)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    bests = {tid: max(r["val/acc"] for r in v) for tid, v in rows.items() if v}
    return {"wall": wall, "fit": rec["wall_s"], "best": max(bests.values()), "epochs": sum(map(len, rows.values())),
            "stopped": rec["counts"].get("early_stopped", 0), "per_trial": bests, "others": str(LAST_RUN["others"])}


def main() -> None:
    a = parse_args()
    print(f"asha_economy: {a.trials} trials x {a.epochs} epochs (digits_asha), seeds {a.seeds}, ASHA overrides "
          f"{a.asha_arg or 'none'}; load {load_average()}")
    for seed in a.seeds:
        fifo = sweep("fifo", seed, a)
        asha = sweep("asha", seed, a)
        for name, r in (("random (fifo)", fifo), ("asha", asha)):
            print(f"  seed {seed} {name:<13}: best val/acc {r['best']:.4f}, epochs {r['epochs']:3d}, "
                  f"early-stopped {r['stopped']:2d}, Tuner.fit {r['fit']:.1f} s, process {r['wall']:.1f} s; "
                  f"{r['others']}")
        acc, ep = asha["best"] / fifo["best"], asha["epochs"] / fifo["epochs"]
        print(f"  seed {seed}: ASHA best / random best = {acc:.2%} "
              f"(goal >= 99%: {'met' if acc >= 0.99 else 'MISSED'}); "
              f"epochs {ep:.2f} of random's (goal <= 0.33: {'met' if ep <= 1 / 3 else 'MISSED'}); "
              f"wall {asha['fit'] / fifo['fit']:.2f}; load {load_average()}", flush=True)
        top = sorted(fifo["per_trial"].values(), reverse=True)[:3]
        print(f"  seed {seed}: random search's top-3 trials at the full budget: {', '.join(f'{x:.4f}' for x in top)}")


if __name__ == "__main__":
    main()
