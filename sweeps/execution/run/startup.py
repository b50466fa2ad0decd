"""Each trial start's seconds, stage by stage, as metrics of its first result (``startup/<stage>_s``).

The start's clock begins in this driver when Tune takes the trial up to run it, and ends when its first result
reaches this driver. Taken up: added to Tune (which sweeps does only once a trial can start), back to pending
after an error (a retry), chosen by the scheduler to resume from a pause, or, for a trial queued ahead
(HyperBand's brackets, :func:`sweeps.execution.tuning.tuner.needs_queue`), chosen by the scheduler or staged by
Tune, whichever comes first (its wait in the queue is not part of its start). On the way the trial's side
stamped wall-clock points (:mod:`sweeps.execution.train.startup`); the stages are the spans between consecutive
points, so they add up to ``startup/total_s``:

========================  =============================================================================
``pg_wait``               waiting for room: GCS placing the trial actor's placement group and, in the
                          worker group's span, the Train workers' group (Ray's own figure for each)
``trial_actor``           the rest up to ``TorchTrainer.fit()``: Tune's staging, the trial actor's
                          process and the trial function's set-up (checkpoint seeding, datasets)
``train_controller``      ``fit()`` until Train's controller actor is up
``worker_group``          the controller until rank 0's loop begins: the worker processes and actors,
                          the torch process group
``loop_setup``            the loop's own set-up (data, model) until its model's first forward pass
``first_epoch``           the first forward pass until the first result reaches this driver
========================  =============================================================================

A point the trial could not stamp (a loop that bound ``ray.train.report`` before sweeps wrapped it sends no loop
points) leaves its stage out, and its seconds count in the next stage present. A loop that never runs a torch
module has no first forward pass: its first epoch is then the training time it reported for it (the trainable's
``time/compute_s`` + ``time/data_s``), the rest of the span its set-up; without those, the whole span is
``first_epoch``. Points come from each process's own wall clock: on a cluster whose hosts' clocks disagree, a
stage that crosses hosts is off by the skew (the total is not: both its ends are this driver's).

A start after the trial's first (a retry, a PBT exploit, a resumed trial) also carries ``startup/restart`` = 1,
so the report reads that run's every start from its metric history.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeps.execution.train.startup import KEY

PREFIX = "startup/"
# (stage, the trial-side point that ends it); the clock starts at ready() and ends at the result's arrival
CHAIN = (("trial_actor", "fit"), ("train_controller", "controller"), ("worker_group", "loop"),
         ("loop_setup", "forward"))
STAGES = ("pg_wait", "trial_actor", "train_controller", "worker_group", "loop_setup", "first_epoch")
TOTAL = f"{PREFIX}total_s"
RESTART = f"{PREFIX}restart"
TRAINED = ("time/compute_s", "time/data_s")  # the trainable's own clock of an epoch (trainables.common.Stopwatch)
UNFINISHED = ("PENDING", "RUNNING", "PAUSED")
PRUNE_EVERY_S = 30.0


def metric(stage: str) -> str:
    return f"{PREFIX}{stage}_s"


def _waited(points: Mapping[str, Any], key: str) -> float | None:
    value = points.get(key)
    return max(float(value), 0.0) if isinstance(value, int | float) else None


def stages(began: float, arrived: float, points: Mapping[str, float],
           trained_s: float | None = None) -> dict[str, float]:
    """The stage seconds of one start (``began``, ``arrived``: this driver's clock) from the trial's
    ``points``, plus the total; they add up to it exactly. ``trained_s``: the first epoch's training seconds the
    trainable reported (splits a loop's span when it has no forward-pass point)."""
    out: dict[str, float] = {}
    last = began
    for stage, point in CHAIN:
        at = points.get(point)
        if isinstance(at, int | float):
            out[stage] = float(at) - last
            last = float(at)
    out["first_epoch"] = arrived - last
    if "forward" not in points and "loop" in points and trained_s is not None:
        out["first_epoch"] = min(max(trained_s, 0.0), max(out["first_epoch"], 0.0))
        out["loop_setup"] = arrived - last - out["first_epoch"]
    waits = 0.0
    for span, key in (("trial_actor", "pg_wait_s"), ("worker_group", "workers_pg_wait_s")):
        waited = _waited(points, key)
        if waited is not None and span in out:
            share = min(waited, max(out[span], 0.0))
            out[span] -= share
            waits += share
            out["pg_wait"] = waits
    metrics = {metric(s): round(out[s], 4) for s in STAGES if s in out}
    metrics[TOTAL] = round(arrived - began, 4)
    return metrics


@dataclass
class _Start:
    """One trial's start in progress (this driver's clock)."""

    began: float
    queued: bool  # taken up but maybe waiting in Tune's queue: the scheduler's choice or Tune's staging starts it
    up: float | None = None  # Tune's trial actor up (on_trial_start)
    queued_when_up: bool = False


class Clock:
    """When each trial's current start began (this driver's wall clock), until its first result."""

    def __init__(self) -> None:
        self.starts: dict[str, _Start] = {}
        self.pruned_at = time.monotonic()

    @property
    def began(self) -> dict[str, float]:
        return {tid: s.began for tid, s in self.starts.items()}

    def ready(self, trial_id: str, at: float | None = None) -> None:
        """Tune took the trial up (added it, or back to pending for a retry): its start may wait in a queue."""
        self.starts[trial_id] = _Start(time.time() if at is None else at, queued=True)

    def chosen(self, trial_id: str, at: float | None = None) -> None:
        """The scheduler chose the trial to run: a queued trial's start begins now (Tune asks its scheduler
        again at every step while the trial's actor is staged: those choices change nothing); a paused trial's
        restart begins now."""
        now = time.time() if at is None else at
        start = self.starts.get(trial_id)
        if start is None:
            self.starts[trial_id] = _Start(now, queued=False)
        elif start.queued and start.up is None:
            start.began, start.queued = now, False

    def up(self, trial_id: str, at: float | None = None) -> None:
        """Tune's trial actor is up (the trial is RUNNING)."""
        start = self.starts.get(trial_id)
        if start is not None:
            start.up = time.time() if at is None else at
            start.queued_when_up = start.queued

    def drop(self, trial_id: str) -> None:
        self.starts.pop(trial_id, None)

    def prune(self, trials: list[Any], force: bool = False) -> None:
        """Forget the starts of trials that are no longer unfinished (a resumed run's finished trials are
        added to Tune again, and never start). Every ``PRUNE_EVERY_S``: one pass over Tune's trials."""
        if not force and time.monotonic() - self.pruned_at < PRUNE_EVERY_S:
            return
        self.pruned_at = time.monotonic()
        live = {t.trial_id for t in trials if t.status in UNFINISHED}
        for tid in [t for t in self.starts if t not in live]:
            del self.starts[tid]

    def on_result(self, trial_id: str, result: dict[str, Any], restart: bool = False, at: float | None = None) -> None:
        """Take the trial's points out of ``result`` (always) and, on a start's first result, put the stages
        in (in place: every later callback, the tracker included, and Tune's loggers see them)."""
        points = result.pop(KEY, None)
        start = self.starts.pop(trial_id, None)
        if start is None or not isinstance(points, Mapping):
            return
        arrived = time.time() if at is None else at
        result.update(stages(began_of(start, points), arrived, points, trained(result)))
        if restart:
            result[RESTART] = 1.0


def began_of(start: _Start, points: Mapping[str, Any]) -> float:
    """When the start began. A trial staged by Tune while it waited in the queue (never chosen, or chosen only
    once its placement group was requested) began at that request: its trial actor up less the group's wait
    (the lease of the actor's process, after the placement, is then not in the start)."""
    waited = _waited(points, "pg_wait_s")
    if start.up is None:
        return start.began
    if waited is None:
        return start.up if start.queued_when_up else start.began
    requested = start.up - waited
    return max(start.began, requested) if start.queued_when_up else min(start.began, requested)


def trained(result: Mapping[str, Any]) -> float | None:
    """The first epoch's training seconds the trainable reported, or None."""
    values = [result[k] for k in TRAINED if isinstance(result.get(k), int | float)]
    return float(sum(values)) if values else None


def is_restart(trial: Any, result: Mapping[str, Any]) -> bool:
    """Whether this start is not the trial's first: a retry (Tune counted a failure) or a start from a
    checkpoint (a PBT exploit, a resume: its first result is past its first iteration)."""
    failures = getattr(trial, "num_failures", 0)
    done, since = result.get("training_iteration"), result.get("iterations_since_restore")
    from_checkpoint = isinstance(done, int) and isinstance(since, int) and done > since
    return bool(isinstance(failures, int) and failures > 0) or from_checkpoint


def clock(name: str) -> Clock:
    """The clock of the run ``name`` of a sweep (its session's)."""
    from sweeps.execution.run import session

    live = session.session(name)
    if live.startup is None:
        live.startup = Clock()
    return live.startup


def startup_callback(name: str) -> Any:
    """The Tune callback that turns each start's points into ``startup/`` metrics; first of all callbacks."""
    from ray.tune import Callback

    class Startup(Callback):  # type: ignore[misc]
        first_step = True

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            clock(name).prune(trials, force=self.first_step)
            self.first_step = False

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).up(trial.trial_id)

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            clock(name).on_result(trial.trial_id, result, restart=is_restart(trial, result))

        def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).ready(trial.trial_id)  # it failed and goes back to pending: its retry starts now

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).drop(trial.trial_id)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            clock(name).drop(trial.trial_id)

    return Startup()
