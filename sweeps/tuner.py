"""Assemble Ray's own searcher, scheduler and Tuner from a :class:`SweepSpec`.

Searchers and schedulers are Ray's (and Optuna's, HyperOpt's) classes, instantiated from their ``_target_``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps import space
from sweeps.config import SweepSpec
from sweeps.plan import Plan
from sweeps.trial import TrialSetup, import_dotted, run_trial

log = logging.getLogger(__name__)


def _instantiate(node: dict[str, Any], **kwargs: Any) -> Any:
    """``_target_`` + ``hydra.utils.instantiate``; passes only the kwargs the target accepts."""
    from hydra.utils import instantiate

    cfg = {k: v for k, v in node.items() if k != "name"}
    target = import_dotted(cfg["_target_"])
    try:
        accepted = inspect.signature(target).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    except (TypeError, ValueError):
        pass
    return instantiate(cfg, _convert_="all", **kwargs)


RESERVED = {"_target_", "name", "_partial_", "_convert_", "_recursive_", "_args_"}
SUPPLIED = {"metric", "mode", "points_to_evaluate", "max_concurrent", "random_state", "hyperparam_mutations"}


def argument_errors(node: dict[str, Any], key: str) -> list[str]:
    """Arguments in a ``_target_`` node that the target does not take (checked before anything starts)."""
    try:
        target = import_dotted(str(node["_target_"]))
    except (ImportError, AttributeError, ValueError) as exc:
        return [f"{key}._target_: cannot import {node.get('_target_')!r} ({exc})"]
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    errors = []
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        allowed = [n for n, p in params.items() if n not in ("self", "args", "kwargs")
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        for arg in sorted(set(node) - RESERVED):
            if arg not in params:
                errors.append(f"{key}.{arg}: {node['_target_'].rsplit('.', 1)[-1]} takes no argument {arg!r}; "
                              f"its arguments: {', '.join(a for a in allowed if a not in SUPPLIED) or '(none)'}")
    for arg, value in node.items():
        if isinstance(value, dict) and "_target_" in value:
            errors += argument_errors(value, f"{key}.{arg}")
    return errors


def check_arguments(spec: SweepSpec) -> None:
    """Raise BadInput when the searcher or scheduler config has arguments its class does not take."""
    from sweeps.errors import BadInput

    errors = argument_errors(spec.searcher, "searcher") + argument_errors(spec.scheduler, "scheduler")
    if errors:
        raise BadInput(*errors)


def build_searcher(spec: SweepSpec, concurrency: int, points: list[dict[str, Any]] | None = None) -> Any:
    """The search algorithm, with warm-start points to evaluate first."""
    points = list(points if points is not None else spec.sweep.points_to_evaluate)
    kwargs: dict[str, Any] = {}
    if spec.searcher["_target_"].endswith("BasicVariantGenerator"):
        # An instance ignores TuneConfig.max_concurrent_trials (RAY_NOTES §5): give it its own limit.
        kwargs.update(random_state=spec.sweep.seed, max_concurrent=concurrency)
    else:
        kwargs.update(metric=spec.sweep.metric, mode=spec.sweep.mode)
    if points:
        kwargs["points_to_evaluate"] = points
    return _instantiate(spec.searcher, **kwargs)


def restored_searcher(spec: SweepSpec, concurrency: int, state_dir: str,
                      points: list[dict[str, Any]] | None = None, generation: int = 1) -> Any:
    """A searcher that continues where an earlier sweep's left off (``extend``, nightly warm start).

    Model-based searchers (Optuna, HyperOpt) are restored from ``searcher-state-*.pkl`` in the earlier
    Tune experiment folder, so their suggestions use every finished trial. Random/grid search has no model:
    it gets a fresh random stream (seed + generation) instead of repeating the earlier samples.
    """
    if spec.searcher["_target_"].endswith("BasicVariantGenerator"):
        kwargs: dict[str, Any] = {"random_state": spec.sweep.seed + 1000 * generation,
                                  "max_concurrent": concurrency}
        if points:
            kwargs["points_to_evaluate"] = points
        return _instantiate(spec.searcher, **kwargs)
    searcher = build_searcher(spec, concurrency)
    searcher.restore_from_dir(state_dir)
    study = getattr(searcher, "_ot_study", None)  # OptunaSearch: queue warm-start points in the study
    if points and study is not None:
        for point in points:
            study.enqueue_trial(point)
    elif points:
        log.warning("%s restored from %s: warm-start points are not re-queued", spec.searcher_name, state_dir)
    return searcher


def is_restored(searcher: Any) -> bool:
    return searcher is not None and not type(searcher).__name__.startswith("BasicVariant")


def build_scheduler(spec: SweepSpec) -> Any:
    node = dict(spec.scheduler)
    kwargs: dict[str, Any] = {}
    if "hyperparam_mutations" in node:
        kwargs["hyperparam_mutations"] = space.to_tune(node.pop("hyperparam_mutations") or {})
    return _instantiate(node, **kwargs)


def param_space(spec: SweepSpec) -> dict[str, Any]:
    return space.to_tune(spec.space, grid_choices=spec.searcher_name == "grid")


def trial_setup(spec: SweepSpec, sweep_id: str) -> TrialSetup:
    t = spec.trainable
    resources = {k.upper() if k.lower() in ("cpu", "gpu") else k: v for k, v in t.resources_per_worker.items()}
    if t.use_gpu:
        resources["GPU"] = resources.get("GPU") or 1.0
    return TrialSetup(
        loop=t.loop, params=dict(t.params), num_workers=t.num_workers, use_gpu=t.use_gpu,
        resources_per_worker=resources, placement_strategy=t.placement_strategy,
        storage_path=spec.storage_path, train_dir=str(Path(spec.storage_path) / f"{sweep_id}-train"),
        worker_max_failures=spec.failure.worker_max_failures, metric=spec.sweep.metric, mode=spec.sweep.mode,
        checkpoint_every=t.checkpoint_every, extra_config={"seed": spec.sweep.seed}, datasets=t.datasets,
    )


def trainable(spec: SweepSpec, sweep_id: str) -> Any:
    from ray import tune

    from sweeps.plan import TRIAL_SLOT

    fn = tune.with_parameters(run_trial, setup=trial_setup(spec, sweep_id))
    # Only the driver's own resources: the Train controller reserves the workers' bundles itself
    # (RAY_NOTES §2). Extra driver resources can pin drivers to nodes that won't be lost.
    resources = {"cpu": spec.cluster.driver_cpus, **spec.cluster.driver_resources}
    if spec.cluster.mode == "local":
        resources[TRIAL_SLOT] = 1.0
    return tune.with_resources(fn, resources)


def count_limit(spec: SweepSpec, plan: Plan) -> int | None:
    """Tune's count-based concurrency limit: none locally (the trial-slot resource limits), else the plan's."""
    return None if spec.cluster.mode == "local" else plan.concurrent_trials


class FinalEpoch:
    """Tune stopper: a trial that reported its last epoch is done, before the scheduler sees that result.

    Schedulers that pause trials (PBT/PB2 waiting for a perturbation, HyperBand at a rung, median stopping
    yielding) would otherwise pause a trial at its final epoch, and resuming it restarts a whole Train worker
    group only to find nothing left to train (or PBT clones a donor into a trial that has no epochs left).
    The budget is the trial's own ``epochs`` (it may be searched) or the trainable's fixed one.
    """

    def __init__(self, epochs: int | None) -> None:
        self.epochs = epochs

    def __call__(self, trial_id: str, result: Mapping[str, Any]) -> bool:
        config = result.get("config") or {}
        budget = config.get("epochs", self.epochs) if isinstance(config, dict) else self.epochs
        epoch = result.get("epoch")
        return isinstance(budget, (int, float)) and isinstance(epoch, (int, float)) and epoch >= budget


def pauses_trials(scheduler: Any) -> bool:
    """Whether Ray's scheduler can pause a trial (and so resume it later in a new worker group)."""
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining

    return isinstance(scheduler, (PopulationBasedTraining, HyperBandScheduler, MedianStoppingRule))


def build_tuner(spec: SweepSpec, plan: Plan, sweep_id: str, callbacks: list[Any],
                points: list[dict[str, Any]] | None = None, searcher: Any = None,
                num_samples: int | None = None, name: str | None = None) -> Any:
    """The Tuner for a new sweep (or, with ``searcher``/``name``, for an extension of one)."""
    from ray import tune

    from sweeps.tune_logs import result_loggers

    scheduler = build_scheduler(spec)
    tune_config = tune.TuneConfig(
        metric=spec.sweep.metric,
        mode=spec.sweep.mode,
        search_alg=searcher if searcher is not None else build_searcher(spec, count_limit(spec, plan) or 0, points),
        scheduler=scheduler,
        num_samples=num_samples if num_samples is not None else spec.sweep.num_samples,
        max_concurrent_trials=count_limit(spec, plan),
        time_budget_s=spec.sweep.time_budget_s,
    )
    run_config = tune.RunConfig(
        name=name or sweep_id,
        storage_path=spec.storage_path,
        callbacks=[*callbacks, *result_loggers()],
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=spec.checkpoint_num_to_keep,
            checkpoint_score_attribute=spec.sweep.metric,
            checkpoint_score_order=spec.sweep.mode,
        ),
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        stop=FinalEpoch(spec.trainable.epochs) if pauses_trials(scheduler) else None,
        verbose=1,
    )
    # A restored model-based searcher already holds its space: Tune refuses a second one.
    space_ = {} if is_restored(searcher) else param_space(spec)
    return tune.Tuner(trainable(spec, sweep_id), param_space=space_, tune_config=tune_config,
                      run_config=run_config)
