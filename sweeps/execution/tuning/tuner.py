"""The Tuner of a sweep: the trial function with its resources, the stopper, Tune's run and tune configs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from sweeps import paths, uris
from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput
from sweeps.execution.resources.plan import TRIAL_SLOT, Plan
from sweeps.execution.train.trial import TrialSetup, run_trial
from sweeps.execution.tuning import firstreport
from sweeps.execution.tuning.budget import Budget
from sweeps.execution.tuning.concurrency import Capacity, census_callback, gate_resumes, make_elastic, process_census
from sweeps.execution.tuning.hours import Ledger, gated, ledger_callback, process_ledger
from sweeps.execution.tuning.progress import Progress, progress_callback
from sweeps.execution.tuning.searchers import build_scheduler, build_searcher, is_restored, param_space
from sweeps.execution.warmstart import warm

if TYPE_CHECKING:
    from sweeps.store import SweepRecord


def train_dir(spec: SweepSpec, sweep_id: str) -> str:
    """Where each trial start's Train run folder goes (deleted when its ``fit()`` ends)."""
    return uris.join(spec.storage_path, f"{sweep_id}-train")


def run_callbacks(spec: SweepSpec, sweep_id: str, plan: Plan | None = None) -> list[Any]:
    """The Tuner's own callbacks (after the tracker): result loggers, the checkpoint keeper (PBT pins,
    latest checkpoints kept for resume, clean-up), the placement-group reaper and the warm pool (when those
    levers are on). ``sweeps resume`` sets them again on a restored Tuner."""
    from sweeps.execution.tuning import keeper
    from sweeps.execution.tuning.tune_logs import result_loggers
    from sweeps.execution.warmstart import pool, reaper

    levers = warm.current(spec.cluster.mode == "local")
    # The reaper first: at the experiment's end its groups' removal stops the Train workers that the keeper's
    # clean-up would otherwise race.
    out = [*result_loggers(), *([reaper.reaper_callback(sweep_id)] if levers.lean else []),
           *keeper.callbacks(train_dir(spec, sweep_id), spec.checkpoint_num_to_keep)]
    if levers.pool and plan is not None and spec.cluster.mode == "local":
        out.append(pool.pool_callback(processes_per_trial(spec, levers), plan.concurrent_trials, plan.total_trials))
    return out


def processes_per_trial(spec: SweepSpec, levers: warm.Levers) -> int:
    """Fresh processes a trial start takes: its Train controller, synchronization actor and workers, and
    its Tune trial actor unless Tune reuses one."""
    return 2 + spec.trainable.num_workers + (0 if levers.reuse else 1)


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
        checkpoint_every=t.checkpoint_every, extra_config={"seed": spec.sweep.seed}, datasets=t.datasets,
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


def observers(spec: SweepSpec, plan: Plan, sweep_id: str, name: str) -> list[Any]:
    """The callbacks that watch a run of the sweep (a new one, an extension, a resumed one): the status line,
    the stall watchdog, the hours ledger (from the hours the sweep's earlier runs held, saved to its record)
    and, on a remote cluster, the census of paused trials. The ledger is this process's (:mod:`hours`):
    a restored Tuner's gated searcher and stopper find it again."""
    from sweeps import store
    from sweeps.execution.tuning.stall import Watch, watchdog_callback

    firstreport.arm()  # the stopper checks the metric (guarded_stopper); a restored one shares this state
    progress = Progress(spec.sweep.metric, spec.sweep.mode, plan.total_trials, spec.trainable.epochs,
                        str(paths.home() / "logs" / f"{name}.log"), spec.sweep.time_budget_s)
    try:
        own: SweepRecord | None = store.load(sweep_id)
    except BadInput:  # a Tuner built outside a recorded sweep (a benchmark, a test): nothing to save to
        own = None
    prior = (own.hours if own else None) or {}
    save = (lambda hours: store.update(sweep_id, hours=hours)) if own else None
    process_ledger().configure(spec.sweep.budget, plan.per_trial.get("CPU", 0.0), plan.per_trial.get("GPU", 0.0),
                               spec.trainable.epochs, (prior.get("cpu_used") or 0.0, prior.get("gpu_used") or 0.0),
                               trial_seconds(spec, plan, own))
    out = [progress_callback(progress), watchdog_callback(Watch(sweep_id, plan.per_trial, spec.sweep.stall_timeout_s)),
           ledger_callback(process_ledger(), save=save)]
    return out if spec.cluster.mode == "local" else [*out, census_callback(process_census())]


def trial_seconds(spec: SweepSpec, plan: Plan, own: SweepRecord | None = None) -> float | None:
    """One trial's seconds (the budget's estimate before a trial ends in this run): from the sweep's own
    earlier runs when it has some (``resume``, ``extend``: its record), else the experiment's last sweep."""
    from sweeps import store

    cpus = plan.per_trial.get("CPU", 0.0)

    def one_trial_s(rec: SweepRecord | None) -> float | None:
        hours, trials = ((rec.hours or {}).get("cpu_used"), (rec.counts or {}).get("total")) if rec else (None, None)
        return float(hours * 3600 / trials / cpus) if hours and trials and cpus else None

    mine = one_trial_s(own)  # read first: the experiment's records are read only when the sweep has no price
    return mine if mine is not None else one_trial_s(store.latest_for(spec.sweep.name))


def guarded_stopper(spec: SweepSpec, ledger: Ledger | None = None) -> Any:
    """:func:`stopper` behind the check that every report holds the sweep's metric(s) (:mod:`firstreport`)."""
    required = (spec.sweep.metric, *(o.metric for o in spec.sweep.objectives))
    return firstreport.guarded(stopper(spec, ledger), tuple(dict.fromkeys(required)), spec.sweep.multi,
                               spec.trainable.metrics)


def build_tuner(spec: SweepSpec, plan: Plan, sweep_id: str, callbacks: list[Any],
                points: list[dict[str, Any]] | None = None, searcher: Any = None,
                num_samples: int | None = None, name: str | None = None) -> Any:
    """The Tuner for a new sweep (or, with ``searcher``/``name``, for an extension of one)."""
    from ray import tune

    scheduler = build_scheduler(spec)
    search_alg = searcher if searcher is not None else build_searcher(spec, 0, points)
    if USER_PENDING is None:  # Tune's own default queues 200+ pending trials (a flood on unbounded sweeps)
        os.environ["TUNE_MAX_PENDING_TRIALS_PG"] = str(max(1, plan.concurrent_trials))
    extra = observers(spec, plan, sweep_id, name or sweep_id)
    ledger = process_ledger()
    if spec.cluster.mode != "local":
        capacity = Capacity(plan.per_trial, plan.worker_bundle, spec.trainable.num_workers,
                            spec.sweep.max_concurrent_trials)
        search_alg = make_elastic(search_alg, capacity, process_census())
        scheduler = gate_resumes(scheduler, capacity)
    if spec.sweep.budget.enabled:
        search_alg = gated(search_alg, ledger)
    multi = spec.sweep.multi  # the searcher holds every objective, the scheduler the primary one
    tune_config = tune.TuneConfig(
        metric=None if multi else spec.sweep.metric,
        mode=None if multi else spec.sweep.mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples if num_samples is not None else spec.sweep.num_samples,
        time_budget_s=spec.sweep.time_budget_s,
        reuse_actors=reuse_actors(spec),
    )
    run_config = tune.RunConfig(
        name=name or sweep_id,
        storage_path=spec.storage_path,
        callbacks=[*callbacks, *extra, *run_callbacks(spec, sweep_id, plan)],
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=spec.checkpoint_num_to_keep,
            checkpoint_score_attribute=spec.sweep.metric,
            checkpoint_score_order=spec.sweep.mode,
        ),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        stop=guarded_stopper(spec, ledger if spec.sweep.budget.enabled else None),
        verbose=0,  # Tune's per-result tables: the progress line and the log file say it shorter
    )
    # A restored model-based searcher already holds its space: Tune refuses a second one.
    space_ = {} if is_restored(searcher) else param_space(spec)
    return tune.Tuner(trainable(spec, sweep_id), param_space=space_, tune_config=tune_config,
                      run_config=run_config)
