"""Budgets in resource-hours (``sweep.budget: {cpu_hours, gpu_hours}``), accounted from what trials hold.

A trial holds its driver plus its Train workers (``per_trial`` CPUs and GPUs) for its wall time, as Tune
clocks it (``time_total_s``, start-up included; a trial not yet reporting counts from its start). A new trial
starts only while the hours used, the running trials' projected rest and one more trial (the mean of the
trials so far) fit the budget; once the budget is spent, running trials end at their next rung
(:mod:`sweeps.execution.budget`) and no trial starts. Wall-clock budgets stay Tune's (``sweep.time_budget_s``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweeps.config.spec import BudgetCfg

log = logging.getLogger(__name__)


class Ledger:
    """Resource-seconds per trial, as the sweep runs (plain data: Tune pickles it with its callbacks)."""

    def __init__(self, budget: BudgetCfg, cpus: float, gpus: float, epochs: int | None) -> None:
        self.budget, self.cpus, self.gpus, self.epochs = budget, cpus, gpus, epochs
        self.seconds: dict[str, float] = {}  # trial -> time_total_s so far
        self.iterations: dict[str, int] = {}
        self.started: dict[str, float] = {}  # trial -> wall time it started, until its first result
        self.ended: set[str] = set()
        self.said = False

    def held_s(self, trial_id: str, now: float) -> float:
        if trial_id in self.started and trial_id not in self.seconds:
            return now - self.started[trial_id]
        return self.seconds.get(trial_id, 0.0)

    def used_hours(self, now: float | None = None) -> tuple[float, float]:
        """(CPU-hours, GPU-hours) the trials held so far."""
        now = time.time() if now is None else now
        seconds = sum(self.held_s(t, now) for t in {*self.seconds, *self.started})
        return seconds * self.cpus / 3600, seconds * self.gpus / 3600

    def _projected_rest_s(self, now: float) -> float:
        rest = 0.0
        for tid in {*self.seconds, *self.started} - self.ended:
            held, done = self.held_s(tid, now), self.iterations.get(tid, 0)
            if self.epochs and done:
                rest += max(held / done * self.epochs - held, 0.0)
        return rest

    def _trial_s(self) -> float:
        """One more trial's seconds: the mean of the ended ones, else of the running ones' projections."""
        ended = [self.seconds.get(t, 0.0) for t in self.ended]
        if ended:
            return sum(ended) / len(ended)
        projected = [s / self.iterations[t] * self.epochs for t, s in self.seconds.items()
                     if self.epochs and self.iterations.get(t)]
        return sum(projected) / len(projected) if projected else 0.0

    def _fits(self, extra_s: float, now: float) -> bool:
        cpu_h, gpu_h = self.used_hours(now)
        more_cpu, more_gpu = extra_s * self.cpus / 3600, extra_s * self.gpus / 3600
        b = self.budget
        return ((b.cpu_hours is None or cpu_h + more_cpu <= b.cpu_hours)
                and (b.gpu_hours is None or gpu_h + more_gpu <= b.gpu_hours))

    def admits_next(self) -> bool:
        now = time.time()
        return self._fits(self._projected_rest_s(now) + self._trial_s(), now)

    def spent(self) -> bool:
        spent = not self._fits(0.0, time.time())
        if spent and not self.said:
            self.said = True
            cpu_h, gpu_h = self.used_hours()
            log.info("budget spent: %.3f CPU-hours, %.3f GPU-hours of %s; running trials end at their next rung",
                     cpu_h, gpu_h, self.budget)
        return spent


def ledger_callback(ledger: Ledger) -> Any:
    """The Tune callback that feeds the ledger."""
    from ray.tune import Callback

    class HoursLedger(Callback):  # type: ignore[misc]
        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ledger.started.setdefault(trial.trial_id, time.time())

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            ledger.seconds[trial.trial_id] = float(result.get("time_total_s", 0.0))
            ledger.iterations[trial.trial_id] = int(result.get("training_iteration", 0))

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ledger.ended.add(trial.trial_id)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ledger.ended.add(trial.trial_id)

    return HoursLedger()


def gated(search_alg: Any, ledger: Ledger) -> Any:
    """The search algorithm, starting a trial only while the budget admits one more (then it finishes)."""
    from ray.tune.search import ConcurrencyLimiter, Searcher
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if isinstance(search_alg, BasicVariantGenerator):
        class BudgetVariants(type(search_alg)):  # type: ignore[misc]
            def next_trial(self) -> Any:
                if ledger.admits_next():
                    return super().next_trial()
                if not (set(self._live_trials) - ledger.ended):
                    self.set_finished()  # nothing runs and nothing more fits: the sweep is done
                return None

        search_alg.__class__ = BudgetVariants
        return search_alg

    class BudgetLimiter(ConcurrencyLimiter):  # type: ignore[misc]
        def suggest(self, trial_id: str) -> Any:
            if ledger.admits_next():
                return super().suggest(trial_id)
            return None if self.live_trials - ledger.ended else Searcher.FINISHED

    return BudgetLimiter(search_alg, max_concurrent=10**6)
