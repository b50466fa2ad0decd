"""Multi-objective results (pure): each trial's objective values, its feasibility, its Pareto rank.

A trial's point is the objectives' values in the result row where it reached its best primary value (the
checkpoint the sweep keeps and promotion registers), so the coordinates of one point belong together.
Dominance: a point dominates another when it is at least as good in every objective and better in one. Rank 1
is the front; ranks are computed among feasible trials first (constraints met), then among the infeasible
ones, so a feasible trial always ranks ahead of an infeasible one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sweeps.config.spec import Constraint, Objective


@dataclass(frozen=True)
class Point:
    trial_id: str
    params: dict[str, Any]
    values: tuple[float, ...]  # one per objective, NaN when the trial did not report it
    feasible: bool
    rank: int  # 1 = on the front of its feasibility class; 0 = no finite values (failed)

    @property
    def on_front(self) -> bool:
        return self.rank == 1 and self.feasible


def satisfied(c: Constraint, value: Any) -> bool:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return {"<=": value <= c.bound, "<": value < c.bound, ">=": value >= c.bound, ">": value > c.bound}[c.op]


def _row_at_best(history: Sequence[Mapping[str, float]], primary: Objective) -> Mapping[str, float] | None:
    best: tuple[float, Mapping[str, float]] | None = None
    for row in history:
        v = row.get(primary.metric)
        if v is None or not math.isfinite(v):
            continue
        score = v if primary.mode == "max" else -v
        if best is None or score > best[0]:
            best = (score, row)
    return best[1] if best else None


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    better = False
    for x, y, m in zip(a, b, modes, strict=True):
        gx, gy = (x, y) if m == "max" else (-x, -y)
        if gx < gy:
            return False
        better = better or gx > gy
    return better


def ranks(values: Sequence[Sequence[float]], modes: Sequence[str]) -> list[int]:
    """Non-dominated sorting: the Pareto rank of each point (1 = not dominated by any other)."""
    left, out, rank = set(range(len(values))), [0] * len(values), 1
    while left:
        front = {i for i in left if not any(dominates(values[j], values[i], modes) for j in left if j != i)}
        for i in front:
            out[i] = rank
        left -= front
        rank += 1
    return out


def points(records: Sequence[Any], objectives: Sequence[Objective],
           constraints: Sequence[Constraint] = ()) -> list[Point]:
    """Every successful trial as a point, feasible ones first, each class best rank first."""
    raw: list[tuple[Any, tuple[float, ...], bool]] = []
    for rec in records:
        row = None if rec.status == "ERROR" else _row_at_best(rec.history, objectives[0])
        if row is None:
            continue
        vals = tuple(float(row.get(o.metric, math.nan)) for o in objectives)
        if not all(math.isfinite(v) for v in vals):
            continue
        raw.append((rec, vals, all(satisfied(c, row.get(c.metric)) for c in constraints)))
    modes = [o.mode for o in objectives]
    out: list[Point] = []
    for feasible in (True, False):
        group = [(r, v) for r, v, f in raw if f is feasible]
        for (rec, vals), rank in zip(group, ranks([v for _, v in group], modes), strict=True):
            out.append(Point(rec.trial_id, dict(rec.params), vals, feasible, rank))
    return sorted(out, key=lambda p: (not p.feasible, p.rank))


def front(pts: Sequence[Point]) -> list[Point]:
    """The feasible non-dominated points (empty when no trial meets the constraints)."""
    return [p for p in pts if p.on_front]


def pick(pts: Sequence[Point], objectives: Sequence[Objective], rule: str) -> Point | None:
    """The trial a promotion takes from the front: ``best_primary``, or ``cheapest_within:PCT`` (the best by the
    second objective among front trials within PCT % of the best primary value)."""
    candidates = front(pts)
    if not candidates:
        return None
    primary = objectives[0]
    sign = 1.0 if primary.mode == "max" else -1.0
    best = max(candidates, key=lambda p: sign * p.values[0])
    if rule == "best_primary" or len(objectives) < 2:
        return best
    pct = float(rule.split(":", 1)[1])
    near = [p for p in candidates if abs(p.values[0] - best.values[0]) <= abs(best.values[0]) * pct / 100]
    second = objectives[1]
    return min(near, key=lambda p: p.values[1] if second.mode == "min" else -p.values[1])


def to_dicts(pts: Sequence[Point]) -> list[dict[str, Any]]:
    return [{"trial_id": p.trial_id, "values": list(p.values), "feasible": p.feasible, "rank": p.rank,
             "params": p.params} for p in pts]
