"""Renderers: a Summary (and its trial records) -> trials.csv, summary.md (first version)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sweeps.store import SweepRecord
from sweeps.summary import Summary


def trials_frame(summ: Summary) -> Any:
    import pandas as pd

    rows = []
    for r in summ.rows:
        rows.append({
            "trial_id": r.trial_id, "status": r.status, **{f"param/{k}": v for k, v in r.params.items()},
            f"final/{summ.metric}": r.final, f"best/{summ.metric}": r.best, "epochs": r.epochs,
            "early_stopped": r.early_stopped, "wall_s": round(r.wall_s, 3), "train_s": round(r.train_s, 3),
            "nonfinite": r.nonfinite, "error": r.error or "",
        })
    return pd.DataFrame(rows)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.4g}"
    return str(x)


def markdown(rec: SweepRecord, summ: Summary) -> str:
    lines = [f"# Sweep {rec.sweep_id}", "", f"- experiment: {rec.experiment}",
             f"- objective: {summ.metric} ({summ.mode})", f"- trials: {summ.counts}"]
    if summ.best is not None:
        lines += [f"- best trial: {summ.best.trial_id}: {summ.metric} = {_fmt(summ.best.best)}",
                  f"- best config: {summ.best.params}"]
    else:
        lines.append("- best trial: none (no trial produced a finite metric)")
    lines += ["", "## Leaderboard", "", "| rank | trial | best | epochs | params |", "|---|---|---|---|---|"]
    for i, r in enumerate(summ.leaderboard, 1):
        lines.append(f"| {i} | {r.trial_id} | {_fmt(r.best)} | {r.epochs} | {r.params} |")
    return "\n".join(lines) + "\n"


def write_all(rec: SweepRecord, records: list[Any], summ: Summary, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "trials.csv"
    trials_frame(summ).to_csv(csv_path, index=False)
    md_path = out_dir / "summary.md"
    md_path.write_text(markdown(rec, summ))
    return [csv_path, md_path]
