"""An Optuna sampler that Tune can pickle: Tune saves the searcher, sampler included, with the Tuner.

Optuna's genetic samplers hold a lock: the ``optuna_ga_lock`` lever swaps it for a picklable one (the
sampler's whole state travels); where the lever is off, :class:`Rebuilt` carries the sampler and pickles as
the config node and arguments it was built from, through Optuna's public sampler interface only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def sampler_class() -> type:
    from optuna.samplers import BaseSampler

    class Rebuilt(BaseSampler):  # type: ignore[misc]
        """Delegates to the sampler ``make()`` builds; pickles as ``make`` (a restored one is built afresh)."""

        def __init__(self, make: Callable[[], Any]) -> None:
            self.make, self.inner = make, make()

        def __reduce__(self) -> tuple[Any, tuple[Any]]:
            return rebuilt, (self.make,)

        def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
            return self.inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
            return self.inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
            return self.inner.sample_independent(study, trial, param_name, param_distribution)

        def before_trial(self, study: Any, trial: Any) -> None:
            self.inner.before_trial(study, trial)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            self.inner.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self.inner.reseed_rng()

    return Rebuilt


def rebuilt(make: Callable[[], Any]) -> Any:
    return sampler_class()(make)


def picklable(make: Callable[[], Any]) -> Any:
    """The sampler ``make()`` builds, in a form Tune can pickle (``make`` must pickle: a partial of a config)."""
    from sweeps.execution.levers import core, optuna_ga_lock

    sampler = make()
    if not optuna_ga_lock.needs_it(sampler):
        return sampler
    if core.applies(optuna_ga_lock.LEVER):
        optuna_ga_lock.make_picklable(sampler)
        return sampler
    return rebuilt(make)
