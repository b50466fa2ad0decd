"""How long ``sweeps report`` takes on a finished sweep, read through Tune's state and MLflow or from the sweep's own
trial index (``sweeps/reports/trialindex.py``), side by side in one run.

Each round first drops the sweep's kept index and model ids and times a report (it reads Tune's experiment state,
every trial's files and MLflow's models, and keeps what it read), then times a second report, which reads the kept
files. Rounds alternate the two, so a noisy machine weighs on both alike. Prints each time, the medians and their
ratio. Point it at any sweep, e.g. the 5,000-trial one ``benchmarks/memory.py`` leaves in its temporary folder:

    python benchmarks/report.py --home /tmp/bench-memory-XXXX/.sweeps --sweep SWEEP_ID [--rounds 3] [--format md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(args: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweeps", *args], env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True, help="the SWEEPS_HOME that holds the sweep")
    p.add_argument("--sweep", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--format", default="md", help="md, csv, html or all")
    a = p.parse_args()
    env = {**os.environ, "SWEEPS_HOME": a.home}
    rec = json.loads((Path(a.home) / "sweeps" / f"{a.sweep}.json").read_text())
    kept = [Path(d) / name for d in rec["experiment_dirs"] for name in ("sweeps-trials.json", "sweeps-models.json")]
    args = ["report", a.sweep, *([] if a.format == "all" else ["--format", a.format])]
    print(f"$ python benchmarks/report.py --sweep {a.sweep} --rounds {a.rounds} --format {a.format}  "
          f"({(rec.get('counts') or {}).get('total', '?')} trials)", flush=True)
    first, again = [], []
    for r in range(a.rounds):
        for f in kept:
            f.unlink(missing_ok=True)
        first.append(timed(args, env))
        again.append(timed(args, env))
        print(f"round {r + 1}: through Tune's state and MLflow {first[-1]:.2f} s, from the kept index "
              f"{again[-1]:.2f} s", flush=True)
    a_med, b_med = statistics.median(first), statistics.median(again)
    print(f"median: {a_med:.2f} s -> {b_med:.2f} s ({b_med / a_med:.2f}x)")


if __name__ == "__main__":
    main()
