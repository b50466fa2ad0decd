"""Each trial start's seconds, stage by stage, as metrics of its first result (``startup/<stage>_s``).

The start's clock begins in this driver, when Tune takes the trial up (:meth:`Clock.ready`: added to Tune,
which sweeps does only once a trial can start; chosen by the scheduler to resume from a pause; back to pending
after an error, to be retried), and ends when its first result reaches this driver. On the
way the trial's side stamped wall-clock points (:mod:`sweeps.execution.train.startup`); the stages are the
spans between consecutive points, so they add up to ``startup/total_s``:

========================  =============================================================================
``pg_wait``               GCS placing the trial's placement group (Ray's own figure for it)
``trial_actor``           the rest up to ``TorchTrainer.fit()``: Tune's staging, the trial actor's
                          process and the trial function's set-up (checkpoint seeding, datasets)
``train_controller``      ``fit()`` until Train's controller actor is up
``worker_group``          the controller until rank 0's loop begins: the worker processes and actors,
                          the torch process group
``loop_setup``            the loop's own set-up (data, model) until its model's first forward pass
``first_epoch``           the first forward pass until the first result reaches this driver
========================  =============================================================================

A point the trial could not stamp (a loop that never runs a torch module has no first forward pass; a loop
that bound ``ray.train.report`` before sweeps wrapped it sends no loop points) leaves its stage out, and its
seconds count in the next stage present. Points come from each process's own wall clock: on a cluster whose
hosts' clocks disagree, a stage that crosses hosts is off by the skew (the total is not: both its ends are
this driver's).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sweeps.execution.train.startup import KEY

PREFIX = "startup/"
# (stage, the trial-side point that ends it); the clock starts at ready() and ends at the result's arrival
CHAIN = (("trial_actor", "fit"), ("train_controller", "controller"), ("worker_group", "loop"),
         ("loop_setup", "forward"))
STAGES = ("pg_wait", "trial_actor", "train_controller", "worker_group", "loop_setup", "first_epoch")
TOTAL = f"{PREFIX}total_s"


def metric(stage: str) -> str:
    return f"{PREFIX}{stage}_s"


def stages(began: float, arrived: float, points: Mapping[str, float]) -> dict[str, float]:
    """The stage seconds of one start (``began``, ``arrived``: this driver's clock) from the trial's
    ``points``, plus the total; they add up to it exactly."""
    out: dict[str, float] = {}
    last = began
    for stage, point in CHAIN:
        at = points.get(point)
        if isinstance(at, int | float):
            out[stage] = float(at) - last
            last = float(at)
    out["first_epoch"] = arrived - last
    waited = points.get("pg_wait_s")
    if isinstance(waited, int | float) and "trial_actor" in out:
        out["pg_wait"] = min(max(float(waited), 0.0), max(out["trial_actor"], 0.0))
        out["trial_actor"] -= out["pg_wait"]
    metrics = {metric(s): round(out[s], 4) for s in STAGES if s in out}
    metrics[TOTAL] = round(arrived - began, 4)
    return metrics


class Clock:
    """When each trial's current start began (this driver's wall clock), until its first result."""

    def __init__(self) -> None:
        self.began: dict[str, float] = {}

    def ready(self, trial_id: str, at: float | None = None) -> None:
        self.began[trial_id] = time.time() if at is None else at

    def chosen(self, trial_id: str) -> None:
        """The scheduler chose the trial to run: a paused trial's restart begins (a new one's began when
        Tune added it, which sweeps does only once it can start)."""
        self.began.setdefault(trial_id, time.time())

    def drop(self, trial_id: str) -> None:
        self.began.pop(trial_id, None)

    def on_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Take the trial's points out of ``result`` (always) and, on a start's first result, put the stages
        in (in place: every later callback, the tracker included, and Tune's loggers see them)."""
        points = result.pop(KEY, None)
        began = self.began.pop(trial_id, None)
        if began is not None and isinstance(points, Mapping):
            result.update(stages(began, time.time(), points))


def clock(name: str) -> Clock:
    """The clock of the run ``name`` of a sweep (its session's)."""
    from sweeps.execution.tuning import session

    extras = session.session(name).extras
    found = extras.get("startup")
    if not isinstance(found, Clock):
        found = extras["startup"] = Clock()
    return found


def startup_callback(name: str) -> Any:
    """The Tune callback that turns each start's points into ``startup/`` metrics; first of all callbacks."""
    from ray.tune import Callback

    class Startup(Callback):  # type: ignore[misc]
        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            clock(name).on_result(trial.trial_id, result)

        def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).ready(trial.trial_id)  # it failed and goes back to pending: its retry starts now

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).drop(trial.trial_id)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).drop(trial.trial_id)

    return Startup()
