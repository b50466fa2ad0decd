"""Report building at scale: 10,000 synthetic trials x 20 history rows -> collect + trials.csv + summary.md.

Goal: collect + CSV + Markdown in under 2 s (plots are not timed: they draw the top trials only).

    python benchmarks/report_scale.py [--trials 10000] [--rows 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import random
import time

from sweeps.reports import formats, summary
from sweeps.reports.results import TrialRecord
from sweeps.store import SweepRecord

METRIC = "val/acc"


def synthetic(n: int, rows: int, seed: int = 0) -> list[TrialRecord]:
    """Trials of ``rows`` reports each (the worst case for a report); 2% failed, 1% diverged to NaN."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        lr, width = 10 ** rng.uniform(-4, -1), rng.choice([32, 64, 128])
        length = rows
        status = "ERROR" if rng.random() < 0.02 else "TERMINATED"
        nan_from = rng.randint(1, length) if rng.random() < 0.01 else None
        history = []
        for t in range(1, length + 1):
            acc = 1 - math.exp(-t * lr * 50) * 0.9 + rng.gauss(0, 0.01)
            history.append(
                {
                    METRIC: math.nan if nan_from is not None and t >= nan_from else acc,
                    "val/loss": 1 - acc,
                    "epoch": float(t),
                    "training_iteration": float(t),
                    "time_this_iter_s": 0.5,
                    "time_total_s": 0.5 * t + 8,
                    "time/compute_s": 0.4,
                    "time/data_s": 0.05,
                    "time/data_frac": 0.11,
                }
            )
        out.append(
            TrialRecord(
                trial_id=f"t{i:05d}",
                status=status,
                params={"lr": lr, "hidden_size": width, "batch_size": 64},
                history=history,
                early_stopped=False,
                error="RuntimeError: boom" if status == "ERROR" else None,
            )
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()

    t0 = time.perf_counter()
    records = synthetic(args.trials, args.rows)
    build_s = time.perf_counter() - t0
    import pandas  # noqa: F401  (imported once, like in a real report; not part of the timing)

    rec = SweepRecord(
        sweep_id="bench",
        experiment="bench",
        created=time.time(),
        status="finished",
        storage_path="-",
        experiment_dirs=[],
        tracking_uri="-",
        metric=METRIC,
        mode="max",
        wall_s=3600.0,
        slots=8,
    )
    times: dict[str, list[float]] = {"collect": [], "csv": [], "md": []}
    for _ in range(args.repeat):
        t = time.perf_counter()
        summ = summary.collect(
            records,
            METRIC,
            "max",
            top_k=10,
            max_epochs=args.rows,
            wall_s=3600.0,
            slots=8,
            cpus_per_trial=3.0,
            gpus_per_trial=0.0,
        )
        times["collect"].append(time.perf_counter() - t)
        t = time.perf_counter()
        csv_text = formats.csv_text(summ)
        times["csv"].append(time.perf_counter() - t)
        t = time.perf_counter()
        md_text = formats.markdown(rec, summ)
        times["md"].append(time.perf_counter() - t)

    best = {k: min(v) for k, v in times.items()}
    total = sum(best.values())
    per_run = sorted(sum(v[i] for v in times.values()) for i in range(args.repeat))
    median = per_run[len(per_run) // 2]
    print(
        f"{args.trials} trials x {args.rows} history rows ({sum(len(r.history) for r in records)} rows; "
        f"built in {build_s:.2f} s)"
    )
    for k, v in times.items():
        print(f"  {k:<8} best {min(v):.3f} s   runs: {', '.join(f'{x:.3f}' for x in v)}")
    print(
        f"  total    {total:.3f} s (collect + csv + md, best of {args.repeat}); median run {median:.3f} s; "
        f"goal < 2 s: {'met' if total < 2 else 'MISSED'}"
    )
    print(f"  counts   {summ.counts}")
    print(
        f"  output   trials.csv {len(csv_text) / 1e6:.1f} MB, {csv_text.count(chr(10)) - 1} rows; "
        f"summary.md {len(md_text) / 1e3:.1f} kB"
    )


if __name__ == "__main__":
    main()
