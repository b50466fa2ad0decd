"""Every trial ends at its budget, counted by Tune, whatever its loop reports: the sweep always ends.

The budget of a trial is its configured epochs (the trial's own ``epochs`` if searched, else
``trainable.params.epochs``), counted in Tune's ``training_iteration`` (one report per epoch is the trainable
contract), never in the loop's own ``epoch`` (a loop may count from 0, or restart from 0). Tune restores
``training_iteration`` with a checkpoint, so a PBT exploit or a retry continues the count. A loop that
restarts from scratch after a checkpoint hand-over would otherwise train forever under PBT (no ``max_t``):
a trial that reported ``OVERRUN`` times its budget is stopped and said so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)
OVERRUN = 2  # a trial may report up to this many times its budget (PBT clones rewind it), then it is stopped


class Budget:
    """Tune stopper: a trial that reached its budget of training iterations is done (before a scheduler can
    pause it at its last epoch and restart a worker group for nothing), and one that overran it is stopped."""

    def __init__(self, epochs: int | None, ledger: Any = None, rungs: tuple[int, ...] = (), every: int = 1) -> None:
        self.epochs = epochs
        self.reports: dict[str, int] = {}
        self.ledger, self.rungs, self.every = ledger, frozenset(rungs), max(every, 1)

    def at_rung(self, iteration: int) -> bool:
        """Where a trial may end without wasting work: a scheduler rung, else a checkpointed epoch."""
        return iteration in self.rungs if self.rungs else iteration % self.every == 0

    def budget(self, result: Mapping[str, Any]) -> int | None:
        config = result.get("config")
        value = config.get("epochs", self.epochs) if isinstance(config, dict) else self.epochs
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        iteration = result.get("training_iteration")
        if (self.ledger is not None and isinstance(iteration, int | float) and self.at_rung(int(iteration))
                and self.ledger.spent()):
            return True  # the resource-hour budget is spent: this trial ends at its rung
        budget = self.budget(result)
        if budget is None:
            return False
        reports = self.reports[trial_id] = self.reports.get(trial_id, 0) + 1
        if reports >= OVERRUN * budget:
            log.warning("trial %s reported %d times for a budget of %d epochs and was stopped: does its loop "
                        "resume from ray.train.get_checkpoint() after a PBT exploit, a retry or a resume?",
                        trial_id, reports, budget)
            return True
        return isinstance(iteration, int | float) and iteration >= budget


class Clock:
    """What ``sweep.time_budget_s`` counts: the seconds the sweep's earlier runs counted (its record), plus this
    run's, less the time this run was paused with no trial running (``idle()``): a budget counts what runs, and
    a resumed or extended sweep goes on with what is left of it, not with the whole budget again."""

    def __init__(self, budget_s: float | None, before_s: float = 0.0, idle: Callable[[], float] | None = None,
                 now: float | None = None) -> None:
        self.budget_s, self.before_s, self.idle = budget_s, before_s, idle
        self.started = time.time() if now is None else now

    def used(self, now: float | None = None) -> float:
        now = time.time() if now is None else now
        return self.before_s + max(now - self.started - (self.idle() if self.idle else 0.0), 0.0)

    def left(self, now: float | None = None) -> float | None:
        return None if self.budget_s is None else max(self.budget_s - self.used(now), 0.0)

    def spent(self, now: float | None = None) -> bool:
        return self.budget_s is not None and self.used(now) >= self.budget_s


def sweep_stopper(name: str, inner: Any) -> Any:
    """The sweep's Tune stopper: ``inner`` (the metric check and the epoch budget) for each trial, and the whole
    sweep stopped once ``inner`` says so or the run ``name``'s :class:`Clock` (in its session) is spent. Tune's own
    ``time_budget_s`` restarts its full budget on every ``Tuner.restore``; this one goes on where it was."""
    from ray.tune import Stopper

    from sweeps.execution.run import session

    class SweepStopper(Stopper):  # type: ignore[misc]
        def __init__(self) -> None:
            self.name, self.inner, self.said = name, inner, False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return bool(self.inner(trial_id, result))

        def stop_all(self) -> bool:
            if self.inner.stop_all() or session.session(self.name).stop_all:
                return True
            clock = session.session(self.name).clock
            if clock is None or not clock.spent():
                return False
            if not self.said:
                self.said = True
                log.info("the sweep's time budget of %.0f s is spent (%.0f s counted, pauses left out): stopping "
                         "its trials", clock.budget_s, clock.used())
            return True

    return SweepStopper()
