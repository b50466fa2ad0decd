"""Elastic concurrency on a remote cluster: as many trials at a time as the cluster holds *now*.

A trial holds its driver plus its Train workers, which Train reserves in its own placement group where Tune
cannot see them (docs/ray.md), so concurrency has to be limited by count. On the embedded local Ray a
trial-slot resource does that (a paused trial gives its slot back). On a remote cluster nodes come and go
(an autoscaler adds them on demand), so the limit is recomputed from the live cluster each time Tune asks for
a new trial, and trials that a scheduler paused (PBT, HyperBand, median) do not count: their resources are
free, and counting them deadlocks a population larger than the cluster. The other half: a paused trial is
resumed only while the cluster has room for it (:func:`capacity_gate`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from sweeps.execution.resources.plan import times
from sweeps.execution.run.session import Census, session

log = logging.getLogger(__name__)
RECHECK_S = 5.0  # how often the cluster's resources are read again


def census_callback(census: Census) -> Any:
    """A Tune callback that records the paused trials at every step of Tune's loop."""
    from ray.tune import Callback

    class PausedTrials(Callback):  # type: ignore[misc]
        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            census.paused = {t.trial_id for t in trials if t.status == "PAUSED"}

    return PausedTrials()


class Capacity:
    """How many trials the live cluster holds: for each resource a trial needs, total // per trial.

    At least one, so a trial's placement group can ask an autoscaler for nodes; at most ``cap`` (the sweep's
    ``max_concurrent_trials``, 0 for none) and at most ``head_cap`` (what the head's memory holds of Train's
    per-run cleaners, :func:`sweeps.execution.resources.plan.head_cap`; 0 for none). Asks the autoscaler for
    room for ``cap`` trials (Ray's ``request_resources``), which is a no-op on a cluster without one.
    """

    def __init__(self, per_trial: dict[str, float], worker_bundle: dict[str, float], num_workers: int,
                 cap: int, head_cap: int = 0) -> None:
        self.per_trial, self.worker_bundle, self.num_workers, self.cap = per_trial, worker_bundle, num_workers, cap
        self.head_cap = head_cap
        self._value, self._read_at, self._requested = 1, -math.inf, False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_read_at"] = -math.inf  # a restored sweep reads its (new) cluster again
        return state

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self._read_at >= RECHECK_S:
            self._read_at = now
            self._value = self._compute()
        return self._value

    def _compute(self) -> int:
        import ray

        total = ray.cluster_resources()
        fit = min((times(total.get(k, 0.0), v) for k, v in self.per_trial.items() if v > 0), default=1)
        fit = max(1, fit)
        head_cap = getattr(self, "head_cap", 0)  # a Capacity pickled before it had one
        if head_cap:
            fit = min(fit, head_cap)
        if self.cap:
            if fit < self.cap and not self._requested:
                self._request()
            fit = min(fit, self.cap)
        return fit

    def _request(self) -> None:
        try:
            from ray.autoscaler.sdk import request_resources

            driver = {k: v - self.num_workers * self.worker_bundle.get(k, 0.0) for k, v in self.per_trial.items()}
            bundles = [b for _ in range(self.cap) for b in [driver, *[self.worker_bundle] * self.num_workers]]
            request_resources(bundles=[{k: v for k, v in b.items() if v > 0} for b in bundles])
        except Exception as exc:  # an older cluster or no autoscaler: concurrency just follows the nodes
            log.debug("request_resources failed: %s", exc)
        self._requested = True


def _limit(capacity: Any, census: Census, live: set[str]) -> int:
    """The count-based limit that lets ``capacity()`` trials run, not counting paused ones."""
    return capacity() + len(census.paused & live)


class Fixed:
    """The embedded Ray's capacity: the plan's concurrency (its trial slots)."""

    def __init__(self, trials: int) -> None:
        self.trials = max(1, trials)

    def __call__(self) -> int:
        return self.trials


def _never() -> bool:
    return False


def elastic_searcher(searcher: Any, capacity: Any, census: Census, hold: Any = _never) -> Any:
    """Wrap a model-based searcher (Optuna, HyperOpt...) in a ConcurrencyLimiter whose limit follows the cluster
    (and that suggests nothing while ``hold()``: a paused or stopping sweep)."""
    from ray.tune.search import ConcurrencyLimiter

    class ElasticLimiter(ConcurrencyLimiter):  # type: ignore[misc]
        def suggest(self, trial_id: str) -> Any:
            if hold():
                return None
            self.max_concurrent = _limit(capacity, census, self.live_trials)
            return super().suggest(trial_id)

    return ElasticLimiter(searcher, max_concurrent=capacity())


def make_elastic(search_alg: Any, capacity: Any, census: Census, hold: Any = _never) -> Any:
    """The search algorithm with a concurrency limit that follows the cluster (``capacity()``), paused trials
    not counted, and no new trial while ``hold()``.

    A trial is made only when it can start at once, so no trial waits queued: a paused sweep then starts none.
    A model-based searcher is wrapped in an elastic ConcurrencyLimiter; random/grid search (Tune's
    BasicVariantGenerator, which is not a Searcher) gets the same limit as a gate (:mod:`.wrappers`).
    """
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from sweeps.execution.run.wrappers import gated_variants

    if not isinstance(search_alg, BasicVariantGenerator):
        return elastic_searcher(search_alg, capacity, census, hold)
    search_alg.max_concurrent = 0  # the gate below limits instead

    def elastic(live: set[str]) -> str:
        if hold():
            return "wait"
        return "go" if len(live) < _limit(capacity, census, live) else "wait"

    return gated_variants(search_alg, [elastic])


def capacity_gate(capacity: Capacity) -> Any:
    """A start gate (:func:`.wrappers.sweep_scheduler`): resume or start a trial only while fewer than
    ``capacity()`` trials run or wait to start.

    Tune resumes a PAUSED trial as soon as the trial's own placement group (its driver) fits; the driver then
    waits for its Train workers' placement group, which Tune cannot see. When a pausing scheduler resumes a
    whole population at once (synchronous PBT after a perturbation), the drivers alone fill the cluster and
    every worker group times out: three drivers and one worker slot on a 4-CPU node, trials failing and
    retrying for as long as the sweep lasts. Tune starts and resumes trials only through the scheduler's
    ``choose_trial_to_run``; this gate answers "none now" while the cluster is full.
    """

    def has_room(tune_controller: Any) -> bool:
        busy = sum(1 for t in tune_controller.get_trials() if t.status in ("RUNNING", "PENDING"))
        return busy < capacity()

    return has_room


class PromotionsFirst:
    """A capacity for new trials, less the paused trials a promoting scheduler (promotion ASHA, PASHA) would
    resume first: Tune starts every PENDING trial on its own, so a new trial made while a promotion waits would
    take the slot the promotion is owed. Finds the scheduler by the run's name (a pickled copy would go stale)."""

    def __init__(self, made: Any, name: str) -> None:
        self.made, self.name = made, name

    def __call__(self) -> int:
        inner: Any = getattr(session(self.name).scheduler, "inner", None)
        owed = inner.promotable_count() if promotes(inner) else 0
        return max(0, int(self.made()) - owed)


def promotes(scheduler: Any) -> bool:
    """A scheduler that resumes paused trials by its own choice before new ones (:class:`PromotionsFirst`)."""
    return callable(getattr(scheduler, "promotable_count", None))
