"""The live parts of a new run's Tuner: its callbacks registered, its searcher and scheduler behind the run's
gates, its stopper; :func:`sweeps.execution.tuning.tuner.build_tuner` makes the Tuner of them.

Every part that Tune pickles into ``tuner.pkl`` (the gates, the stopper, the callbacks' handles) names the run
and finds its live state in the run's session (:mod:`sweeps.execution.run.session`), so a resumed Tuner finds the
state of the run that resumes it.
"""

from __future__ import annotations

from typing import Any

from sweeps.config.spec import SweepSpec
from sweeps.execution.resources.plan import Plan
from sweeps.execution.run import callbacks, control, firstreport, session
from sweeps.execution.run.budget import Budget, sweep_stopper
from sweeps.execution.run.concurrency import Capacity, Fixed, PromotionsFirst, capacity_gate, make_elastic, promotes
from sweeps.execution.run.hours import Ledger
from sweeps.execution.run.wrappers import budget_gated, halting, is_gated, sweep_scheduler
from sweeps.execution.tuning.tuner import QUEUED, build_tuner, limit_pending, needs_queue, rungs


def stopper(spec: SweepSpec, ledger: Ledger | None = None) -> Budget:
    """The sweep's stopper: each trial ends at its epoch budget (or its rung once the hour budget is spent)."""
    return Budget(spec.trainable.epochs, ledger, rungs(spec), spec.trainable.checkpoint_every)


def guarded_stopper(spec: SweepSpec, name: str, ledger: Ledger | None = None) -> Any:
    """:func:`stopper` behind the check that every report holds the sweep's metric(s) (:mod:`firstreport`)."""
    required = (spec.sweep.metric, *(o.metric for o in spec.sweep.objectives))
    return firstreport.guarded(name, stopper(spec, ledger), tuple(dict.fromkeys(required)), spec.sweep.multi,
                               spec.trainable.metrics)


def is_restored(searcher: Any) -> bool:
    """A restored model-based searcher (it holds its space); random/grid search (even gated) is not."""
    from ray.tune.search.basic_variant import BasicVariantGenerator

    return searcher is not None and not isinstance(searcher, BasicVariantGenerator) and not is_gated(searcher)


def new_tuner(spec: SweepSpec, plan: Plan, sweep_id: str, name: str, given: list[Any],
              points: list[dict[str, Any]] | None = None, searcher: Any = None, num_samples: int | None = None,
              max_trials: int | None = None) -> Any:
    """The Tuner of a new run ``name`` of the sweep (``searcher``: an extension's restored one; ``max_trials``:
    at most that many trials, ``extend --more-trials N`` on a grid, whose ``num_samples`` counts passes)."""
    from sweeps.execution.tuning.searchers import build_scheduler, build_searcher

    search_alg = searcher if searcher is not None else build_searcher(spec, 0, points)
    limit_pending(plan)
    run_callbacks = callbacks.register(spec, plan, sweep_id, name, given)
    live = session.session(name)
    starts: list[Any] = []
    capacity: Any = Fixed(plan.concurrent_trials)
    if spec.cluster.mode != "local":
        capacity = Capacity(plan.per_trial, plan.worker_bundle, plan.workers,
                            spec.sweep.max_concurrent_trials, plan.head_cap or 0)
        starts.append(capacity_gate(capacity))
    inner = build_scheduler(spec)
    made = Fixed(QUEUED) if needs_queue(inner) else capacity  # how many trials may exist unfinished at once
    if promotes(inner):  # promotion ASHA, PASHA: a free slot resumes an owed promotion before a new trial starts
        made = PromotionsFirst(made, name)
        if spec.cluster.mode == "local":
            starts.append(capacity_gate(capacity))
    search_alg = make_elastic(search_alg, made, live.census, control.holding(name))
    if max_trials is not None and is_gated(search_alg):
        search_alg.limit = max_trials
    scheduler = sweep_scheduler(inner, [*starts, control.start_gate(name)], control.trial_stops(name), name=name)
    if spec.sweep.budget.enabled:
        search_alg = budget_gated(search_alg, live.ledger)
    search_alg = halting(search_alg, control.halted(name))
    stop = sweep_stopper(name, guarded_stopper(spec, name, live.ledger if spec.sweep.budget.enabled else None))
    return build_tuner(spec, sweep_id, name, search_alg=search_alg, scheduler=scheduler, stopper=stop,
                       callbacks=run_callbacks, num_samples=num_samples, restored=is_restored(searcher))
