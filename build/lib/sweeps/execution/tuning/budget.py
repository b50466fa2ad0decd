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
from collections.abc import Mapping
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
