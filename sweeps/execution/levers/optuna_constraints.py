"""Lever ``optuna_constraints``: a trial's outcome constraints set on its Optuna trial before Tune tells Optuna.

Optuna's samplers read constraints from ``Trial.set_constraint`` (public), but Ray's ``OptunaSearch`` keeps the
Optuna trial of each Tune trial in its private ``_ot_trials``. Fallback: the sampler's ``constraints_func``
(public, deprecated since Optuna 5.0) reads the values that :mod:`sweeps.execution.tuning.objectives` records
for the trial's parameters.
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, binds, first, has


def check(searcher: Any, trial_cls: Any) -> str | None:
    """A Tune ``OptunaSearch`` keeps its Optuna trials in a dict by trial id, and Optuna's trial takes the call
    :func:`set_constraints` makes: ``set_constraint(key, value)``."""
    trials = getattr(searcher, "_ot_trials", None)
    return first(None if isinstance(trials, dict) else "OptunaSearch keeps no _ot_trials dict",
                 has(trial_cls, "set_constraint"), binds(getattr(trial_cls, "set_constraint", None), None, "c0", 0.0))


def _probe() -> str | None:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    return check(OptunaSearch(metric=["a", "b"], mode=["max", "min"]), optuna.trial.Trial)


LEVER = Lever(name="optuna_constraints", package="ray", checked=("2.60.",),
              what="outcome constraints set on each Optuna trial (Trial.set_constraint)",
              fallback="the sampler's constraints_func reads them (deprecated in Optuna 5)", probe=_probe)


def set_constraints(searcher: Any, trial_id: str, values: dict[str, float]) -> bool:
    """Set ``values`` on the Optuna trial of ``trial_id``; False when the searcher has no such trial."""
    ot_trial = searcher._ot_trials.get(trial_id)
    if ot_trial is None:
        return False
    for key, value in values.items():
        ot_trial.set_constraint(key, value)
    return True
