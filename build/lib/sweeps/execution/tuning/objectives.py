"""Multi-objective search with early stopping: Optuna's samplers over several metrics (through Ray's
``OptunaSearch``) while a scheduler stops trials on the primary one, and outcome constraints for the samplers
that use them (NSGA-II/III, TPE, GP). Random and grid search need nothing: their Pareto front is computed
afterwards (:mod:`sweeps.reports.pareto`), where the constraints always apply.

A trial's constraint values reach Optuna before Tune tells Optuna the trial's objectives: through the
``optuna_constraints`` lever (``Trial.set_constraint`` on the searcher's Optuna trial), or else through the
sampler's own ``constraints_func``, which reads what :class:`Recorded` noted for the trial's parameters.
Either way a ``ConcurrencyLimiter`` (Tune's public searcher wrapper) sees each completed trial first.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from sweeps.config.spec import Constraint

UNLIMITED = 10**6


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


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        name = f"{prefix}{k}"
        out.update(_flat(v, name + "/") if isinstance(v, Mapping) else {name: v})
    return out


def params_key(params: Mapping[str, Any]) -> str:
    """One key for a configuration, the same for Tune's nested config and Optuna's flat ``/``-joined params."""
    return json.dumps(_flat(params), sort_keys=True, default=str)


class Recorded:
    """Constraint values by configuration: noted when a trial completes, read by the sampler's
    ``constraints_func`` right after (pickles with the searcher: Tune saves both in one state)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.values: dict[str, list[float]] = {}

    def note(self, params: Mapping[str, Any], values: Mapping[str, float]) -> None:
        self.values[params_key(params)] = [values[n] for n in self.names]

    def __call__(self, frozen_trial: Any) -> list[float]:
        return self.values.get(params_key(frozen_trial.params), [1.0] * len(self.names))


def sampler_kwargs(constraints: Sequence[Constraint]) -> tuple[dict[str, Any], Recorded | None]:
    """What the sampler is built with: nothing where the lever applies, else a ``constraints_func``."""
    from sweeps.execution.levers import core, optuna_constraints

    if core.applies(optuna_constraints.LEVER):
        return {}, None
    book = Recorded([str(c) for c in constraints])
    return {"constraints_func": book}, book


def quietly(build: Any) -> Any:
    """``build()`` without Optuna's deprecation warning for ``constraints_func`` (the fallback means it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return build()


def record_constraints(searcher: Any, constraints: Sequence[Constraint], book: Recorded | None) -> Any:
    """The OptunaSearch, wrapped so each trial's constraint values reach Optuna before its objectives."""
    from ray.tune.search import ConcurrencyLimiter

    from sweeps.execution.levers import optuna_constraints

    chosen = tuple(constraints)

    class Constrained(ConcurrencyLimiter):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(searcher, max_concurrent=UNLIMITED)
            self.configs: dict[str, dict[str, Any]] = {}

        def suggest(self, trial_id: str) -> Any:
            config = super().suggest(trial_id)
            if isinstance(config, dict):
                self.configs[trial_id] = config
            return config

        def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                              error: bool = False) -> None:
            config = self.configs.pop(trial_id, None)
            if result and config is not None:
                values = constraint_values(chosen, result)
                if book is not None:
                    book.note(config, values)
                else:
                    optuna_constraints.set_constraints(self.searcher, trial_id, values)
            super().on_trial_complete(trial_id, result=result, error=error)

    return Constrained()
