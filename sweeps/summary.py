"""collect(records) -> Summary: pure, no I/O. Renderers live in :mod:`sweeps.report`.

Rules: NaN/inf values never count as best; failed trials are listed but never ranked; ties go to the trial
that reached the value first (earlier in the list).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sweeps.results import TrialRecord


@dataclass(frozen=True)
class Row:
    trial_id: str
    status: str
    params: dict[str, Any]
    best: float  # NaN when the trial has no finite value
    final: float
    iterations: int
    epochs: int
    early_stopped: bool
    wall_s: float
    train_s: float  # pure training time: the loop's data + compute seconds, as reported by the trainable
    nonfinite: bool
    error: str | None


@dataclass(frozen=True)
class Summary:
    metric: str
    mode: str
    rows: tuple[Row, ...]
    best: Row | None
    leaderboard: tuple[Row, ...]
    counts: dict[str, int]
    epochs_trained: int
    epochs_budget: int | None
    compute_saved: float | None  # share of the full-budget epochs that early stopping did not spend
    train_s_total: float
    wall_s: float | None
    slots: int | None
    efficiency: float | None  # T_ideal / T_observed
    extras: dict[str, Any] = field(default_factory=dict)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def best_value(values: list[float], mode: str) -> float:
    finite = [v for v in values if _finite(v)]
    if not finite:
        return math.nan
    return max(finite) if mode == "max" else min(finite)


def to_row(rec: TrialRecord, metric: str, mode: str) -> Row:
    values = rec.values(metric)
    final = values[-1] if values else math.nan
    epochs = int(max((h.get("epoch", 0) for h in rec.history), default=0)) or rec.iterations
    train_s = sum(h.get("time/compute_s", 0.0) + h.get("time/data_s", 0.0) for h in rec.history)
    if train_s == 0.0:
        train_s = sum(h.get("time_this_iter_s", 0.0) for h in rec.history)
    return Row(
        trial_id=rec.trial_id, status=rec.status, params=dict(rec.params),
        best=best_value(values, mode), final=final if _finite(final) else math.nan,
        iterations=rec.iterations, epochs=epochs, early_stopped=rec.early_stopped, wall_s=rec.wall_s,
        train_s=train_s, nonfinite=rec.nonfinite or any(not _finite(v) for v in values), error=rec.error,
    )


def rank(rows: list[Row], mode: str) -> list[Row]:
    """Rankable rows (not failed, finite best), best first; stable, so ties keep their order."""
    ok = [r for r in rows if r.status != "ERROR" and _finite(r.best)]
    return sorted(ok, key=lambda r: -r.best if mode == "max" else r.best)


def collect(records: list[TrialRecord], metric: str, mode: str, *, top_k: int = 5,
            max_epochs: int | None = None, wall_s: float | None = None, slots: int | None = None) -> Summary:
    """Summarize a sweep's trials.

    Args:
        records: the trials (any status).
        metric, mode: the sweep's objective.
        top_k: leaderboard length.
        max_epochs: the full budget per trial (for the compute early stopping saved).
        wall_s: the sweep's observed wall time; slots: trials that could run at once (for efficiency).
    """
    rows = [to_row(r, metric, mode) for r in records]
    ranked = rank(rows, mode)
    counts = {
        "total": len(rows),
        "completed": sum(r.status == "TERMINATED" and not r.early_stopped for r in rows),
        "early_stopped": sum(r.status == "TERMINATED" and r.early_stopped for r in rows),
        "failed": sum(r.status == "ERROR" for r in rows),
        "unfinished": sum(r.status not in ("TERMINATED", "ERROR") for r in rows),
        "nonfinite": sum(r.nonfinite for r in rows),
    }
    epochs_trained = sum(r.epochs for r in rows)
    budget = max_epochs * len(rows) if max_epochs else None
    saved = (1.0 - epochs_trained / budget) if budget else None
    train_total = sum(r.train_s for r in rows)
    efficiency = None
    if wall_s and slots:
        efficiency = (train_total / slots) / wall_s
    return Summary(
        metric=metric, mode=mode, rows=tuple(rows), best=ranked[0] if ranked else None,
        leaderboard=tuple(ranked[:top_k]), counts=counts, epochs_trained=epochs_trained,
        epochs_budget=budget, compute_saved=saved, train_s_total=train_total, wall_s=wall_s, slots=slots,
        efficiency=efficiency,
    )
