"""The Tuner of a sweep: the trial function with its resources, Tune's run and tune configs, of the parts the run
made (its gated searcher and scheduler, its stopper, its callbacks: :mod:`sweeps.execution.run.assembly`)."""

from __future__ import annotations

import logging
import os
from typing import Any

from sweeps import uris
from sweeps.config.spec import SweepSpec
from sweeps.execution.resources.plan import TRIAL_SLOT, Plan, in_process, per_trial
from sweeps.execution.train.trial import TrialSetup, preemption_not_applied, run_trial
from sweeps.execution.tuning.searchers import param_space
from sweeps.execution.warmstart import warm

log = logging.getLogger(__name__)


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
        max_preemption_failures=spec.failure.max_preemption_failures,
        preemption_grace_s=spec.failure.preemption_grace_s,
        checkpoint_every=t.checkpoint_every, datasets=t.datasets,
        extra_config={"seed": spec.sweep.seed, **t.loop_extras(spec.sweep.metric)},
        sweep_id=sweep_id, lean=warm.current(spec.cluster.mode == "local").lean, in_process=in_process(spec),
        job_env_vars=None if spec.cluster.mode == "local" else job_env_vars(),
    )


def _say_preemption_support(setup: TrialSetup) -> None:
    """Once per sweep: on a Ray whose Train lacks the preemption parameters, that they are not applied (a
    warning where the config sets them away from Train's defaults)."""
    said = preemption_not_applied(setup.max_preemption_failures, setup.preemption_grace_s)
    if said is None:
        return
    changed = setup.max_preemption_failures != -1 or setup.preemption_grace_s != 0.0
    (log.warning if changed else log.info)("%s", said)


def train_dir(spec: SweepSpec, sweep_id: str) -> str:
    """Where each trial start's Train run folder goes (deleted when its ``fit()`` ends)."""
    return uris.join(spec.storage_path, f"{sweep_id}-train")


def job_env_vars() -> dict[str, str]:
    """The variables the job's runtime env gives every process of a remote sweep."""
    import ray

    return dict((ray.get_runtime_context().runtime_env or {}).get("env_vars") or {})


def trainable(spec: SweepSpec, sweep_id: str) -> Any:
    from ray import tune

    setup = trial_setup(spec, sweep_id)
    _say_preemption_support(setup)
    fn = tune.with_parameters(run_trial, setup=setup)
    # Only the driver's own resources: the Train controller reserves the workers' bundles itself
    # (docs/ray.md). Extra driver resources can pin drivers to nodes that won't be lost. A trial in its own
    # process holds all it trains with (its GPU too: Ray sets its CUDA_VISIBLE_DEVICES).
    resources: dict[str, float] = {"cpu": spec.cluster.driver_cpus, **spec.cluster.driver_resources}
    if in_process(spec):
        resources = {{"CPU": "cpu", "GPU": "gpu"}.get(k, k): v for k, v in per_trial(spec).items()}
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
    """Whether a finished trial's actor (its driver process) runs the next trial: always for trials in their own
    process (torch, the data and the loop imported once per process), else the ``reuse`` warm-start lever;
    ``SWEEPS_REUSE_ACTORS`` (0 or 1) overrides both."""
    told = os.environ.get("SWEEPS_REUSE_ACTORS")
    if told in ("0", "1"):
        return told == "1"
    return in_process(spec) or warm.current(spec.cluster.mode == "local").reuse


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


QUEUED = 1_000_000  # no limit of sweeps' own: Tune queues at most TUNE_MAX_PENDING_TRIALS_PG pending trials


def needs_queue(scheduler: Any) -> bool:
    """Synchronous HyperBand (and BOHB) fills each bracket with the trials Tune has queued, and a bracket whose
    trials ended takes the next ones in: made one by one as slots free, every trial would land in the first
    bracket, which never halves. For these, trials are made ahead as Tune makes them; a pause still makes
    none, though Tune may start one it had queued already (docs/operate.md)."""
    from ray.tune.schedulers import HyperBandScheduler

    return isinstance(scheduler, HyperBandScheduler)


def build_tuner(spec: SweepSpec, sweep_id: str, name: str, *, search_alg: Any, scheduler: Any, stopper: Any,
                callbacks: list[Any], num_samples: int | None = None, restored: bool = False) -> Any:
    """The Tuner of the run ``name`` of a sweep, of the parts the run made (:mod:`sweeps.execution.run.assembly`):
    its search algorithm and scheduler behind the run's gates, its stopper and its callbacks. ``restored``: the
    search algorithm is a restored model-based one, which already holds its space (Tune refuses a second)."""
    from ray import tune

    multi = spec.sweep.multi  # the searcher holds every objective, the scheduler the primary one
    tune_config = tune.TuneConfig(
        metric=None if multi else spec.sweep.metric,
        mode=None if multi else spec.sweep.mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples if num_samples is not None else spec.sweep.num_samples,
        time_budget_s=None,  # the sweep's own clock (run.budget.sweep_stopper): it counts across resume and extend
        reuse_actors=reuse_actors(spec),
    )
    run_config = tune.RunConfig(
        name=name,
        storage_path=spec.storage_path,
        callbacks=callbacks,
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=spec.checkpoint_num_to_keep,
            checkpoint_score_attribute=spec.sweep.metric,
            checkpoint_score_order=spec.sweep.mode,
        ),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        stop=stopper,
        verbose=0,  # Tune's per-result tables: the progress line and the log file say it shorter
    )
    return tune.Tuner(trainable(spec, sweep_id), param_space={} if restored else param_space(spec),
                      tune_config=tune_config, run_config=run_config)
