"""Lever ``tune_trials``: an experiment's trials read back without Tune reading every trial's results into pandas.

``ExperimentAnalysis(path).trials`` is Tune's public way to read an experiment's trials back. Its constructor also
reads every trial's ``result.json`` into a DataFrame (its private ``_fetch_trial_dataframes``), which the sweep's
reports never use: they read each trial's rows themselves. Over 5,000 trials that was most of a report's time.
This lever's subclass skips that one step, and the trials are Tune's own (``_load_trials``, as the constructor
calls it). Fallback: Tune's ``ExperimentAnalysis`` as it is (the same trials, seconds slower over thousands).
"""

from __future__ import annotations

import inspect
from typing import Any

from sweeps.execution.levers.core import Lever, applies, binds


def check(analysis_cls: Any) -> str | None:
    """The constructor fills ``self.trials`` itself and then calls ``self._fetch_trial_dataframes()`` with no
    argument, whose result only its DataFrame methods read (what the override returns empty)."""
    hook = getattr(analysis_cls, "_fetch_trial_dataframes", None)
    if hook is None:
        return f"{analysis_cls.__name__} has no _fetch_trial_dataframes"
    if problem := binds(hook, None):
        return problem
    source = inspect.getsource(analysis_cls.__init__)
    if "self._fetch_trial_dataframes()" not in source or "self.trials = " not in source:
        return f"{analysis_cls.__name__}.__init__ no longer sets self.trials and calls _fetch_trial_dataframes()"
    return None


def _probe() -> str | None:
    from ray.tune import ExperimentAnalysis

    return check(ExperimentAnalysis)


LEVER = Lever(name="tune_trials", package="ray", checked=("2.53.", "2.60."),
              what="reports read an experiment's trials without Tune reading every trial's results into pandas",
              fallback="Tune's ExperimentAnalysis as it is: the same trials, seconds slower over thousands",
              probe=_probe)


def trials(experiment_dir: str) -> list[Any]:
    """Tune's trials of the experiment in ``experiment_dir`` (stubs, as ``ExperimentAnalysis`` returns them)."""
    from ray.tune import ExperimentAnalysis

    if not applies(LEVER):
        return list(ExperimentAnalysis(experiment_dir).trials)

    class TrialsOnly(ExperimentAnalysis):  # type: ignore[misc]
        def _fetch_trial_dataframes(self) -> dict[str, Any]:
            return {}

    return list(TrialsOnly(experiment_dir).trials)
