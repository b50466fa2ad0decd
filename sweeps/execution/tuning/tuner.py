"""The Tuner of a sweep: the trial function with its resources, the stopper, Tune's run and tune configs."""

from __future__ import annotations

import os
from typing import Any

from sweeps import uris
from sweeps.config.spec import SweepSpec
from sweeps.execution.resources.plan import TRIAL_SLOT, Plan
from sweeps.execution.train.trial import TrialSetup, run_trial
from sweeps.execution.tuning import control, firstreport, recovery, session
from sweeps.execution.tuning.budget import Budget, sweep_stopper
from sweeps.execution.tuning.callbacks import register, train_dir
from sweeps.execution.tuning.concurrency import Capacity, Fixed, capacity_gate, make_elastic
from sweeps.execution.tuning.hours import Ledger
from sweeps.execution.tuning.searchers import build_scheduler, build_searcher, is_restored, param_space
from sweeps.execution.tuning.wrappers import budget_gated, is_gated, sweep_scheduler
from sweeps.execution.warmstart import warm


def trial_setup(spec: SweepSpec, sweep_id: str) -> TrialSetup:
    t = spec.trainable
    resources = {k.upper() if k.lower() in ("cpu", "gpu") else k: v for k, v in t.resources_per_worker.items()}
    if t.use_gpu:
        resources["GPU"] = resources.get("GPU") or 1.0
    return TrialSetup(
        loop=t.loop, params=dict(t.params), num_workers=t.num_workers, use_gpu=t.use_gpu,
        resources_per_worker=resources, placement_strategy=t.placement_strategy,
        storage_path=spec.storage_path, train_dir=train_dir(spec, sweep_id),
        worker_max_failures=spec.failure.worker_max_failures, metric=spec.sweep.metric, mode=spec.sweep.mode,
        checkpoint_every=t.checkpoint_every, datasets=t.datasets,
        extra_config={"seed": spec.sweep.seed, **t.loop_extras(spec.sweep.metric)},
        sweep_id=sweep_id, lean=warm.current(spec.cluster.mode == "local").lean,
        job_env_vars=None if spec.cluster.mode == "local" else job_env_vars(),
    )


def job_env_vars() -> dict[str, str]:
    """The variables the job's runtime env gives every process of a remote sweep."""
    import ray

    return dict((ray.get_runtime_context().runtime_env or {}).get("env_vars") or {})


def trainable(spec: SweepSpec, sweep_id: str) -> Any:
    from ray import tune

    fn = tune.with_parameters(run_trial, setup=trial_setup(spec, sweep_id))
    # Only the driver's own resources: the Train controller reserves the workers' bundles itself
    # (docs/ray.md). Extra driver resources can pin drivers to nodes that won't be lost.
    resources = {"cpu": spec.cluster.driver_cpus, **spec.cluster.driver_resources}
    if spec.cluster.mode == "local":
        resources[TRIAL_SLOT] = 1.0
    return tune.with_resources(fn, resources)


USER_PENDING = os.environ.get("TUNE_MAX_PENDING_TRIALS_PG")  # a value the user set wins


def limit_pending(plan: Plan) -> None:
    """Tune queues at most as many pending trials as the plan runs at once (its own default queues 200+: a flood
    on unbounded sweeps), unless the user set ``TUNE_MAX_PENDING_TRIALS_PG``. Every run of a sweep (a new one,
    a resumed one, an extension) sets it the same way."""
    if USER_PENDING is None:
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max(1, plan.concurrent_trials))


def reuse_actors(spec: SweepSpec) -> bool:
    """Whether a finished trial's actor (its driver process) runs the next trial: the ``reuse`` warm-start
    lever, unless ``SWEEPS_REUSE_ACTORS`` (0 or 1) says otherwise."""
    told = os.environ.get("SWEEPS_REUSE_ACTORS")
    return told == "1" if told in ("0", "1") else warm.current(spec.cluster.mode == "local").reuse


def rungs(spec: SweepSpec) -> tuple[int, ...]:
    """The iterations where ASHA/HyperBand decide (grace x reduction^k): where a trial ends without waste."""
    sched = spec.scheduler
    grace, rf, max_t = sched.get("grace_period", 1), sched.get("reduction_factor"), sched.get("max_t")
    if not isinstance(rf, int | float) or not isinstance(max_t, int | float) or rf <= 1:
        return ()
    out, r = [], float(grace or 1)
    while r <= max_t:
        out.append(int(r))
        r *= rf
    return (*out, int(max_t))


def stopper(spec: SweepSpec, ledger: Ledger | None = None) -> Budget:
    """The sweep's stopper: each trial ends at its epoch budget (or its rung once the hour budget is spent)."""
    return Budget(spec.trainable.epochs, ledger, rungs(spec), spec.trainable.checkpoint_every)


def guarded_stopper(spec: SweepSpec, name: str, ledger: Ledger | None = None) -> Any:
    """:func:`stopper` behind the check that every report holds the sweep's metric(s) (:mod:`firstreport`)."""
    required = (spec.sweep.metric, *(o.metric for o in spec.sweep.objectives))
    return firstreport.guarded(name, stopper(spec, ledger), tuple(dict.fromkeys(required)), spec.sweep.multi,
                               spec.trainable.metrics)


QUEUED = 1_000_000  # no limit of sweeps' own: Tune queues at most TUNE_MAX_PENDING_TRIALS_PG pending trials


def needs_queue(scheduler: Any) -> bool:
    """Synchronous HyperBand (and BOHB) fills each bracket with the trials Tune has queued, and a bracket whose
    trials ended takes the next ones in: made one by one as slots free, every trial would land in the first
    bracket, which never halves. For these, trials are made ahead as Tune makes them; a pause still makes
    none, though Tune may start one it had queued already (docs/operate.md)."""
    from ray.tune.schedulers import HyperBandScheduler

    return isinstance(scheduler, HyperBandScheduler)


def build_tuner(spec: SweepSpec, plan: Plan, sweep_id: str, callbacks: list[Any],
                points: list[dict[str, Any]] | None = None, searcher: Any = None,
                num_samples: int | None = None, name: str | None = None, max_trials: int | None = None) -> Any:
    """The Tuner for a new sweep (or, with ``searcher``/``name``, for an extension of one). Its live state is
    the session of the run ``name`` (:mod:`sweeps.execution.tuning.session`): its outcome is read from there.
    ``max_trials``: at most that many trials (``extend --more-trials N`` on a grid, whose ``num_samples`` counts
    passes over the grid)."""
    from ray import tune

    name = name or sweep_id
    search_alg = searcher if searcher is not None else build_searcher(spec, 0, points)
    limit_pending(plan)
    run_callbacks = register(spec, plan, sweep_id, name, callbacks)
    live = session.session(name)
    starts: list[Any] = []
    capacity: Any = Fixed(plan.concurrent_trials)
    if spec.cluster.mode != "local":
        capacity = Capacity(plan.per_trial, plan.worker_bundle, spec.trainable.num_workers,
                            spec.sweep.max_concurrent_trials)
        starts.append(capacity_gate(capacity))
    inner = build_scheduler(spec)
    made = Fixed(QUEUED) if needs_queue(inner) else capacity  # how many trials may exist unfinished at once
    search_alg = make_elastic(search_alg, made, live.census, control.holding(name))
    if max_trials is not None and is_gated(search_alg):
        search_alg.limit = max_trials
    scheduler = sweep_scheduler(inner, [*starts, control.start_gate(name)], control.trial_stops(name), name=name)
    if spec.sweep.budget.enabled:
        search_alg = budget_gated(search_alg, live.ledger)
    multi = spec.sweep.multi  # the searcher holds every objective, the scheduler the primary one
    tune_config = tune.TuneConfig(
        metric=None if multi else spec.sweep.metric,
        mode=None if multi else spec.sweep.mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples if num_samples is not None else spec.sweep.num_samples,
        time_budget_s=None,  # the sweep's own clock (budget.sweep_stopper): it counts across resume and extend
        reuse_actors=reuse_actors(spec),
    )
    run_config = tune.RunConfig(
        name=name,
        storage_path=spec.storage_path,
        callbacks=run_callbacks,
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=spec.checkpoint_num_to_keep,
            checkpoint_score_attribute=spec.sweep.metric,
            checkpoint_score_order=spec.sweep.mode,
        ),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        stop=sweep_stopper(name, guarded_stopper(spec, name, live.ledger if spec.sweep.budget.enabled else None)),
        verbose=0,  # Tune's per-result tables: the progress line and the log file say it shorter
    )
    # A restored model-based searcher already holds its space: Tune refuses a second one.
    space_ = {} if is_restored(searcher) else param_space(spec)
    tuner = tune.Tuner(trainable(spec, sweep_id), param_space=space_, tune_config=tune_config,
                       run_config=run_config)
    recovery.keep_tuner(uris.join(spec.storage_path, name))  # a good copy of tuner.pkl for a damaged resume
    return tuner
