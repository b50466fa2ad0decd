"""The sweep's metric, checked against what the trials really report: a report without it ends the sweep.

The contract is one report per epoch that holds the sweep's metric (and, multi-objective, every objective's).
Tune's own check raises out of ``Tuner.fit`` with a traceback; so this driver takes the check over
(``TUNE_DISABLE_STRICT_METRIC_CHECKING``, set for this process only) and makes it the sweep's stopper's first
question. The first result that lacks a metric stops its trial before any scheduler or searcher sees it, and
ends the whole sweep the way Tune ends one (``Stopper.stop_all``): no other trial is started. The driver then
records the sweep failed and exits 2, naming the metrics the loop did report and the override that uses one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeps.config.contract import objective

log = logging.getLogger(__name__)

ENV = "TUNE_DISABLE_STRICT_METRIC_CHECKING"
# What Tune, Train and the bridge add to every result: never the loop's own metrics.
NOT_METRICS = frozenset({
    "training_iteration", "time_total_s", "time_this_iter_s", "time_since_restore", "iterations_since_restore",
    "timesteps_total", "timesteps_since_restore", "episodes_total", "timestamp", "date", "pid", "hostname",
    "node_ip", "node_id", "config", "checkpoint_dir_name", "should_checkpoint", "done", "trial_id",
    "experiment_id", "experiment_tag",
})

def problem(sweep_id: str) -> str | None:
    """Why the sweep was ended for a missing metric (None when it was not)."""
    from sweeps.execution.run.session import session

    return session(sweep_id).metric_problem


def note(sweep_id: str, text: str) -> None:
    from sweeps.execution.run.session import session

    s = session(sweep_id)
    if s.metric_problem is None:
        s.metric_problem = text
        log.error("%s", text)


def arm() -> None:
    """Before a sweep (new, extended or resumed) runs in this process: the check is ours, not Tune's."""
    os.environ[ENV] = "1"


def reported(result: Mapping[str, Any]) -> list[str]:
    """The numeric metrics the loop put in ``result`` (what Tune, Train and sweeps add left out)."""
    return [k for k, v in result.items() if k not in NOT_METRICS
            and not str(k).startswith(("sweeps/", "config/", "startup/"))
            and isinstance(v, int | float) and not isinstance(v, bool)]


def missing(result: Mapping[str, Any], required: Sequence[str]) -> list[str]:
    return [m for m in required if m not in result]


def explain(trial_id: str, result: Mapping[str, Any], absent: list[str], multi: bool,
            declared: Sequence[str] = ()) -> str:
    """The message: which metric the report lacked, what the loop reported, and the override to use."""
    names = reported(result)
    said = ", ".join(names) if names else "no numeric metric"
    which = "the first report" if result.get("training_iteration") in (1, None) else \
        f"report {result.get('training_iteration')}"
    text = (f"sweep.metric: {which} of trial {trial_id} has no {', '.join(absent)}; the loop reported {said}. "
            f"The sweep was stopped there: ")
    best = objective(names)
    if multi:
        return text + (f"set sweep.objectives to metrics among {said}, or make every ray.train.report hold "
                       f"{', '.join(absent)}")
    if best is None:
        return text + f"make every ray.train.report of the loop hold {absent[0]} (one report per epoch)"
    listed = f" 'trainable.metrics=[{','.join(names)}]'" if declared and best[0] not in declared else ""
    return text + (f"run it again with `sweep.metric={best[0]} sweep.mode={best[1]}{listed}`, or make every "
                   f"ray.train.report of the loop hold {absent[0]}")


def guarded(sweep_id: str, inner: Callable[[str, Mapping[str, Any]], bool], required: Sequence[str],
            multi: bool, declared: Sequence[str] = ()) -> Any:
    """The sweep's Tune stopper: ``inner`` (the epoch budget), after the metric check. Its verdict lives in the
    sweep's session, so a copy restored by ``sweeps resume`` shares the resuming run's state."""
    from ray.tune import Stopper

    class MetricCheck(Stopper):  # type: ignore[misc]
        def __init__(self) -> None:
            self.inner, self.required, self.multi, self.declared = inner, tuple(required), multi, tuple(declared)
            self.sweep_id = sweep_id

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            absent = missing(result, self.required)
            if absent:
                note(self.sweep_id, explain(trial_id, result, absent, self.multi, self.declared))
                return True
            return bool(self.inner(trial_id, result))

        def stop_all(self) -> bool:
            return problem(self.sweep_id) is not None

    return MetricCheck()
