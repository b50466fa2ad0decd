"""The Pareto front in the report: a table (front first, feasible first) and a plot (2-D scatter with the front
drawn and dominated trials faded; parallel coordinates for 3+ objectives)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeps.config.spec import Constraint, Objective
from sweeps.reports.outline import Section, Table, fmt
from sweeps.reports.pareto import Point, front

MAX_ROWS = 50


def section(pts: Sequence[Point], objectives: Sequence[Objective], constraints: Sequence[Constraint]) -> Section:
    names = [f"{o.metric} ({o.mode})" for o in objectives]
    on_front = front(pts)
    bullets = [f"objectives: {', '.join(names)}; the scheduler and the checkpoints rank by {names[0]}",
               f"{len(on_front)} trial(s) on the front of {len(pts)} with finite values"]
    if constraints:
        feasible = sum(p.feasible for p in pts)
        bullets.append(f"constraints: {', '.join(map(str, constraints))}: {feasible} of {len(pts)} trials feasible; "
                       f"an infeasible trial is never on the front nor promoted")
    rows = [[str(p.rank) if p.feasible else f"{p.rank} (infeasible)", p.trial_id, *(fmt(v) for v in p.values),
             "yes" if p.on_front else "", ", ".join(f"{k}={fmt(v)}" for k, v in p.params.items())]
            for p in pts[:MAX_ROWS]]
    headers = ["Pareto rank", "trial", *names, "on front", "parameters"]
    return Section("Pareto front", bullets, [Table(headers, rows)])


def plot(pts: Sequence[Point], objectives: Sequence[Objective], path: Path) -> Path | None:
    if len(pts) < 1 or len(objectives) < 2:
        return None
    from sweeps.reports.plots import new_figure, save_png

    fig = new_figure(7, 4.5)
    ax = fig.add_subplot()
    if len(objectives) == 2:
        _scatter(ax, pts, objectives)
    else:
        _parallel(ax, pts, objectives)
    return save_png(fig, path)


def _scatter(ax: Any, pts: Sequence[Point], objectives: Sequence[Objective]) -> None:
    x_o, y_o = objectives[1], objectives[0]
    faded = [p for p in pts if not p.on_front]
    ax.scatter([p.values[1] for p in faded], [p.values[0] for p in faded], alpha=0.3, label="dominated or "
               "infeasible")
    line = sorted(front(pts), key=lambda p: p.values[1])
    ax.plot([p.values[1] for p in line], [p.values[0] for p in line], marker="o", linewidth=2,
            label="Pareto front")
    for p in line:
        ax.annotate(p.trial_id[-5:], (p.values[1], p.values[0]), fontsize=7)
    ax.set_xlabel(f"{x_o.metric} ({x_o.mode})")
    ax.set_ylabel(f"{y_o.metric} ({y_o.mode})")
    ax.set_title("Pareto front")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _parallel(ax: Any, pts: Sequence[Point], objectives: Sequence[Objective]) -> None:
    cols = list(zip(*(p.values for p in pts), strict=True))
    lo = [min(c) for c in cols]
    span = [max(c) - m or 1.0 for c, m in zip(cols, lo, strict=True)]
    xs = list(range(len(objectives)))
    for p in pts:
        ys = [(v - m) / s if math.isfinite(v) else math.nan for v, m, s in zip(p.values, lo, span, strict=True)]
        ax.plot(xs, ys, alpha=0.9 if p.on_front else 0.2, linewidth=2 if p.on_front else 1)
    ax.set_xticks(xs, [f"{o.metric}\n({o.mode})" for o in objectives])
    ax.set_ylabel("scaled to each objective's range")
    ax.set_title("Objectives of every trial (the front in bold)")
