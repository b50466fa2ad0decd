"""``report``, ``compare`` and ``list``: reports rebuilt from stored results (nothing is rerun)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sweeps import store
from sweeps.config import stored
from sweeps.errors import BadInput
from sweeps.reports.compare import write_comparison
from sweeps.reports.formats import FORMATS
from sweeps.reports.load import default_report_dir, list_frame
from sweeps.reports.write import write


def cli_report(args: argparse.Namespace) -> int:
    """``python -m sweeps report SWEEP_ID|latest [--format md|csv|html|all] [--out DIR]``."""
    from sweeps.api import load

    fmt_arg = getattr(args, "format", "all") or "all"
    if fmt_arg != "all" and fmt_arg not in FORMATS:
        raise BadInput(f"--format: {fmt_arg!r} is not a format; choose md, csv, html or all")
    formats = FORMATS if fmt_arg == "all" else (fmt_arg,)
    sweep = load(args.sweep_id)
    rec, records = sweep.record, sweep.trial_records
    out = (Path(args.out) if getattr(args, "out", None) else default_report_dir(rec)).resolve()
    from sweeps.reports.trialindex import model_ids

    written = write(rec, records, sweep.summary, out, formats, model_ids(rec))
    print(f"report for {rec.sweep_id} ({len(records)} trial(s)) in {out}:")
    for p in written:
        print(f"  {p}")
    return 0


def cli_compare(args: argparse.Namespace) -> int:
    """``python -m sweeps compare SWEEP_A SWEEP_B [--out DIR]``."""
    rec_a, rec_b = store.load(args.sweep_a), store.load(args.sweep_b)
    if getattr(args, "out", None):
        out = Path(args.out)
    else:
        out = Path(stored.of(rec_a).report.dir) / "compare" / f"{rec_a.sweep_id}__vs__{rec_b.sweep_id}"
    out = out.resolve()
    md = write_comparison(rec_a, rec_b, out)
    print(f"comparison of {rec_a.sweep_id} (A) and {rec_b.sweep_id} (B):")
    for p in sorted(out.iterdir()):
        print(f"  {p}")
    verdict = md.read_text().split("## Comparison", 1)[-1].split("\n|", 1)[0]
    for line in verdict.strip().splitlines():
        print(f"  {line.lstrip('- ')}")
    return 0


def cli_list(args: argparse.Namespace) -> int:
    """``python -m sweeps list [--experiment NAME]``."""
    from sweeps import paths

    records = store.all_records()
    experiment = getattr(args, "experiment", None)
    if experiment:
        known = sorted({r.experiment for r in records})
        records = [r for r in records if r.experiment == experiment]
        if not records:
            raise BadInput(
                f"--experiment: no sweeps of {experiment!r}; experiments with sweeps: "
                f"{', '.join(known) or '(none)'}"
            )
    if not records:
        hint = f"no sweeps yet under {paths.index_dir()}; try `python -m sweeps run +experiment=quickstart`"
        print(hint)
        return 0
    print(list_frame(records).to_string(index=False))
    return 0
