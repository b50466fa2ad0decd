"""Resource-hours a sweep's trials held, and budgets in them (``sweep.budget: {cpu_hours, gpu_hours}``).

A trial holds its driver plus its Train workers (``plan.per_trial``: the one place that says what a trial
takes) from the moment Tune starts it until it ends, pauses or fails, on the driver's clock (Tune's own
callbacks). The ledger sums those intervals; it is the figure the sweep's record and its parent run carry, and a
budget is checked against it. A budget is the sweep's, across ``resume`` and ``extend``: the hours of the
sweep's earlier runs are the ledger's starting point, and the ledger is saved to the record as trials end.

A new trial starts only while the hours used, the running and waiting trials' projected rest and one more
trial fit; the cost of a trial is the mean of those that ended, else a projection of the running ones, else the
previous sweep of the experiment's, else unknown: then trials start one at a time until one cost is known.
Once the budget is spent, running trials end at their next rung (:mod:`sweeps.execution.run.budget`). Wall-clock
budgets stay Tune's (``sweep.time_budget_s``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweeps.config.spec import BudgetCfg

log = logging.getLogger(__name__)
SAVE_EVERY_S = 30.0


class Ledger:
    """Seconds each trial held its resources. One per sweep in this process (:func:`ledger_of`): a resumed
    sweep unpickles its gated searcher and stopper from Tune's state and must find the ledger its callback
    feeds."""

    def __init__(self, sweep_id: str = "") -> None:
        self.sweep_id = sweep_id
        self.configure(BudgetCfg(), 0.0, 0.0, None)

    def configure(self, budget: BudgetCfg, cpus: float, gpus: float, epochs: int | None,
                  prior_hours: tuple[float, float] = (0.0, 0.0), trial_s: float | None = None) -> Ledger:
        self.budget, self.cpus, self.gpus, self.epochs = budget, cpus, gpus, epochs
        self.prior = prior_hours  # CPU- and GPU-hours of the sweep's earlier runs (resume, extend)
        self.estimate_s = trial_s  # one trial's seconds in the experiment's previous sweep, when known
        self.held: dict[str, float] = {}  # unfinished trial -> seconds held in closed intervals
        self.open: dict[str, float] = {}  # trial -> when its current interval began
        self.iterations: dict[str, int] = {}  # unfinished trial -> its latest training iteration
        self.ended: set[str] = set()  # the ids only (the gated searcher asks); their seconds are summed below
        self.ended_s = 0.0  # the seconds the ended trials held, in all
        self.ended_n = 0
        self.waiting = 0  # trials Tune created but has not started (PENDING)
        self.said = False
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return ledger_of, (self.sweep_id,)

    def start(self, trial_id: str, now: float) -> None:
        self.open.setdefault(trial_id, now)
        self.ended.discard(trial_id)

    def stop(self, trial_id: str, now: float, ended: bool) -> None:
        began = self.open.pop(trial_id, None)
        if began is not None:
            self.held[trial_id] = self.held.get(trial_id, 0.0) + max(now - began, 0.0)
        if ended and trial_id not in self.ended:
            # an ended trial's seconds go into the sums: a sweep of thousands of trials keeps per-trial figures
            # for its unfinished ones only
            self.ended.add(trial_id)
            self.ended_s += self.held.pop(trial_id, 0.0)
            self.ended_n += 1
            self.iterations.pop(trial_id, None)

    def held_s(self, trial_id: str, now: float) -> float:
        began = self.open.get(trial_id)
        return self.held.get(trial_id, 0.0) + (now - began if began is not None else 0.0)

    def used_hours(self, now: float | None = None) -> tuple[float, float]:
        """(CPU-hours, GPU-hours) the sweep's trials held so far, earlier runs included."""
        now = time.time() if now is None else now
        seconds = self.ended_s + sum(self.held_s(t, now) for t in {*self.held, *self.open})
        return self.prior[0] + seconds * self.cpus / 3600, self.prior[1] + seconds * self.gpus / 3600

    def trial_s(self, now: float) -> float | None:
        """One trial's seconds: the mean of the ended ones, else the running ones' projection, else the
        previous sweep's; None when nothing is known yet."""
        if self.ended_n:
            return self.ended_s / self.ended_n
        projected = [self.held_s(t, now) / n * self.epochs for t, n in self.iterations.items()
                     if self.epochs and n and t in self.open]
        return sum(projected) / len(projected) if projected else self.estimate_s

    def _rest_s(self, now: float, one: float) -> float:
        rest = 0.0
        for tid in self.open:
            done = self.iterations.get(tid, 0)
            held = self.held_s(tid, now)
            rest += max(held / done * self.epochs - held, 0.0) if self.epochs and done else max(one - held, 0.0)
        return rest + self.waiting * one

    def _fits(self, extra_s: float, now: float) -> bool:
        cpu_h, gpu_h = self.used_hours(now)
        b = self.budget
        return ((b.cpu_hours is None or cpu_h + extra_s * self.cpus / 3600 <= b.cpu_hours)
                and (b.gpu_hours is None or gpu_h + extra_s * self.gpus / 3600 <= b.gpu_hours))

    def admits_next(self) -> bool:
        """Whether one more trial fits the budget, counting the running and waiting ones' rest."""
        if not self.budget.enabled:
            return True
        now = time.time()
        one = self.trial_s(now)
        if one is None:  # no trial's cost is known yet: one at a time until one is
            return not self.open and not self.waiting and self._fits(0.0, now)
        return self._fits(self._rest_s(now, one) + one, now)

    def spent(self) -> bool:
        spent = self.budget.enabled and not self._fits(0.0, time.time())
        if spent and not self.said:
            self.said = True
            cpu_h, gpu_h = self.used_hours()
            log.info("budget spent: %.3f CPU-hours, %.3f GPU-hours of %s; running trials end at their next rung",
                     cpu_h, gpu_h, self.budget)
        return spent

    def record(self) -> dict[str, float | None]:
        """The hours for the sweep's record (and its parent run's tags)."""
        cpu_h, gpu_h = self.used_hours()
        return {"cpu_used": cpu_h, "gpu_used": gpu_h, "cpu_budget": self.budget.cpu_hours,
                "gpu_budget": self.budget.gpu_hours}


_ledgers: dict[str, Ledger] = {}


def ledger_of(sweep_id: str) -> Ledger:
    """The sweep's ledger in this process (made on first use; :meth:`Ledger.configure` sets it up)."""
    if sweep_id not in _ledgers:
        _ledgers[sweep_id] = Ledger(sweep_id)
    return _ledgers[sweep_id]


def forget(sweep_id: str) -> None:
    _ledgers.pop(sweep_id, None)


def ledger_callback(ledger: Ledger, save: Any = None) -> Any:
    """The Tune callback that feeds the ledger from Tune's own view of each trial (and ``save(hours)`` it)."""
    from ray.tune import Callback

    class HoursLedger(Callback):  # type: ignore[misc]
        saved_at = 0.0

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ledger.start(trial.trial_id, time.time())

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            now = time.time()
            for t in trials:  # a paused, errored or stopped trial releases what it held
                if t.trial_id in ledger.open and t.status != "RUNNING":
                    ledger.stop(t.trial_id, now, ended=t.status in ("TERMINATED", "ERROR"))
            ledger.waiting = sum(t.status == "PENDING" for t in trials)
            if save is not None and now - self.saved_at >= SAVE_EVERY_S:  # a killed driver loses little
                self.saved_at = now
                save(ledger.record())

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            if trial.trial_id not in ledger.ended:
                ledger.iterations[trial.trial_id] = int(result.get("training_iteration", 0))

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ledger.stop(trial.trial_id, time.time(), ended=True)
            if save is not None:
                save(ledger.record())

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.on_trial_complete(iteration, trials, trial)

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            now = time.time()
            for tid in list(ledger.open):
                ledger.stop(tid, now, ended=False)
            if save is not None:
                save(ledger.record())

    return HoursLedger()
