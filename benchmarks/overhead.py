"""`sweeps` against a minimal hand-written Ray Tune + Train script (benchmarks/handwritten.py): same sweep.

Both run trainables.digits.train_loop with the same trials, epochs, workers, seed, concurrency, space and
scheduler, from a fresh process each time (process start to exit: imports, Ray start, sweep, shutdown;
`sweeps` also writes MLflow, its index and the report). The runs alternate A B B A A B ... so a drift in
the machine's load hits both. Goal: median(sweeps) / median(handwritten) <= 1.0.

    python benchmarks/overhead.py [N=3] [--trials 6] [--epochs 8] [--workers 2] [--concurrency 2]
        [--scheduler fifo|asha] [--space digits_small|digits] [--bridge callback|queue] [--seed 0]
        [--sweeps-arg KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LAST_RUN, REPO, load_average, median, run_sweeps, run_timed, trial_rows  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", nargs="?", type=int, default=3, help="runs of each")
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--scheduler", choices=("fifo", "asha"), default="fifo")
    p.add_argument("--space", choices=("digits_small", "digits"), default="digits_small")
    p.add_argument("--bridge", choices=("callback", "queue"), default="callback")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweeps-arg", action="append", default=[], help="extra override for the sweeps run")
    return p.parse_args()


def sweeps_overrides(a: argparse.Namespace) -> list[str]:
    return ["run", "+experiment=quickstart", f"scheduler={a.scheduler}", f"search_space={a.space}",
            f"sweep.num_samples={a.trials}", f"trainable.params.epochs={a.epochs}",
            f"trainable.num_workers={a.workers}", f"sweep.max_concurrent_trials={a.concurrency}",
            f"sweep.seed={a.seed}", *a.sweeps_arg]


def run_sweeps_once(a: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    try:
        wall, rec = run_sweeps(sweeps_overrides(a), home)
        rows = trial_rows(rec)
        return {"wall": wall, "fit": rec["wall_s"], "epochs": sum(len(r) for r in rows.values()),
                "best": rec["best"].get("value", float("nan"))}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_handwritten_once(a: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-handwritten-"))
    cmd = [sys.executable, str(REPO / "benchmarks" / "handwritten.py"), "--trials", str(a.trials), "--epochs",
           str(a.epochs), "--workers", str(a.workers), "--concurrency", str(a.concurrency), "--scheduler",
           a.scheduler, "--space", a.space, "--bridge", a.bridge, "--seed", str(a.seed),
           "--storage", str(home / "ray")]
    try:
        wall, proc = run_timed(cmd, home)
        line = next(x for x in proc.stdout.splitlines() if x.startswith("HANDWRITTEN "))
        out = json.loads(line.removeprefix("HANDWRITTEN "))
        bests = [t["best"] for t in out["trials"] if t["best"] is not None]
        return {"wall": wall, "fit": out["fit_s"], "epochs": sum(t["epochs"] for t in out["trials"]),
                "best": max(bests) if bests else float("nan")}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def show(name: str, i: int, r: dict[str, Any]) -> None:
    print(f"  {name:<11} run {i}: wall {r['wall']:6.1f} s  (Tuner.fit {r['fit']:6.1f} s)  epochs {r['epochs']:3d}  "
          f"best val/acc {r['best']:.4f}  {LAST_RUN['others']}; load {load_average()}", flush=True)


def main() -> None:
    a = parse_args()
    print(f"overhead: {a.trials} trials x {a.epochs} epochs x {a.workers} workers, concurrency {a.concurrency}, "
          f"{a.scheduler}, space {a.space}, seed {a.seed}; handwritten bridge: {a.bridge}; {a.n} runs each; "
          f"load {load_average()}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"sweeps": [], "handwritten": []}
    for i in range(a.n):
        order = ("sweeps", "handwritten") if i % 2 == 0 else ("handwritten", "sweeps")
        for name in order:
            r = run_sweeps_once(a) if name == "sweeps" else run_handwritten_once(a)
            runs[name].append(r)
            show(name, i, r)
    for key, label in (("wall", "process wall"), ("fit", "Tuner.fit only")):
        s, h = median([r[key] for r in runs["sweeps"]]), median([r[key] for r in runs["handwritten"]])
        print(f"{label:<15}: sweeps median {s:.1f} s, handwritten median {h:.1f} s, ratio {s / h:.2f} "
              f"(goal <= 1.0: {'met' if s / h <= 1.0 else 'MISSED'})")
    print(f"load at the end: {load_average()}")


if __name__ == "__main__":
    main()
