"""Multi-objective search with early stopping: Optuna's samplers over several metrics (through Ray's
``OptunaSearch``) while a scheduler stops trials on the primary one, and outcome constraints for the samplers
that use them (NSGA-II/III, TPE, GP read ``Trial.set_constraint``). Random and grid search need nothing: their
Pareto front is computed afterwards (:mod:`sweeps.reports.pareto`), where the constraints always apply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sweeps.config.spec import Constraint


def constraint_values(constraints: Sequence[Constraint], result: Mapping[str, Any]) -> dict[str, float]:
    """Optuna's convention: one value per constraint, feasible when <= 0 (a metric not reported: infeasible)."""
    out = {}
    for c in constraints:
        v = result.get(c.metric)
        if not isinstance(v, int | float) or not math.isfinite(v):
            out[str(c)] = 1.0
        elif c.op in ("<=", "<"):
            out[str(c)] = float(v) - c.bound + (1e-12 if c.op == "<" else 0.0)
        else:
            out[str(c)] = c.bound - float(v) + (1e-12 if c.op == ">" else 0.0)
    return out


def record_constraints(searcher: Any, constraints: Sequence[Constraint]) -> Any:
    """Make an OptunaSearch set each trial's constraint values before Optuna is told the trial's objectives."""
    chosen = tuple(constraints)

    class ConstrainedOptunaSearch(type(searcher)):  # type: ignore[misc]
        def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                              error: bool = False) -> None:
            ot_trial = self._ot_trials.get(trial_id)
            if ot_trial is not None and result:
                for key, value in constraint_values(chosen, result).items():
                    ot_trial.set_constraint(key, value)
            super().on_trial_complete(trial_id, result=result, error=error)

    searcher.__class__ = ConstrainedOptunaSearch
    return searcher
