"""Ray's (and Optuna's, HyperOpt's) searcher and scheduler classes, instantiated from their ``_target_``.

Instantiation goes through the allowlist's own resolver (:func:`sweeps.config.targets.build`), not Hydra's:
every nested ``_target_`` is resolved and checked again where it is called, and no value is re-interpolated.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sweeps import uris
from sweeps.config import security, space
from sweeps.config.sections.objectives import constrained_sampler
from sweeps.config.spec import SweepSpec
from sweeps.config.targets import TargetRefused, build, resolve
from sweeps.errors import BadInput
from sweeps.execution.tuning.objectives import UNLIMITED, Recorded, quietly, record_constraints, sampler_kwargs
from sweeps.execution.tuning.samplers import picklable

log = logging.getLogger(__name__)


def instantiate(node: dict[str, Any], allowed: tuple[str, ...] = (), key: str = "searcher", **kwargs: Any) -> Any:
    """Build a ``_target_`` node inside the allowlist; passes only the kwargs the target accepts."""
    prefixes = security.prefixes(allowed)
    cfg = {k: v for k, v in node.items() if k != "name"}
    try:
        target = resolve(cfg["_target_"], prefixes)
    except TargetRefused as exc:
        raise BadInput(f"{key}._target_: {exc}") from None
    try:
        accepted = inspect.signature(target).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    except (TypeError, ValueError):
        pass
    return build(cfg, prefixes, key, **kwargs)


def is_basic(spec: SweepSpec) -> bool:
    """Random/grid search (Tune's BasicVariantGenerator): no model, no metric."""
    return str(spec.searcher["_target_"]).endswith("BasicVariantGenerator")


def build_searcher(spec: SweepSpec, concurrency: int, points: list[dict[str, Any]] | None = None) -> Any:
    """The search algorithm, with warm-start points to evaluate first."""
    points = list(points if points is not None else spec.sweep.points_to_evaluate)
    kwargs: dict[str, Any] = {}
    node = dict(spec.searcher)
    if is_basic(spec):
        # An instance ignores TuneConfig.max_concurrent_trials (docs/ray.md): give it its own limit.
        kwargs.update(random_state=spec.sweep.seed, max_concurrent=concurrency)
    elif spec.sweep.multi:  # OptunaSearch over every objective (validated before launch)
        kwargs.update(metric=[o.metric for o in spec.sweep.objectives], mode=[o.mode for o in spec.sweep.objectives])
    else:
        kwargs.update(metric=spec.sweep.metric, mode=spec.sweep.mode)
    if points:
        kwargs["points_to_evaluate"] = points
    if isinstance(node.get("storage"), str):  # OptunaSearch's study database (validated: a sqlite:/// URL)
        import optuna

        node["storage"] = optuna.storages.RDBStorage(node["storage"])
    book, constrained = None, spec.sweep.multi and spec.sweep.constraints and constrained_sampler(node)
    if isinstance(node.get("sampler"), dict) and "_target_" in node["sampler"]:
        kwargs["sampler"], book = _sampler(spec, node)
    searcher = instantiate(node, spec.allowed_targets, "searcher", **kwargs)
    if constrained:
        return record_constraints(searcher, spec.sweep.constraints, book)
    return searcher


def _sampler(spec: SweepSpec, node: dict[str, Any]) -> tuple[Any, Recorded | None]:
    """The OptunaSearch's sampler, built here (not by the searcher's node): picklable as Tune needs, and with
    the constraints' ``constraints_func`` where that is how constraints reach it (:mod:`.objectives`)."""
    sampler_node = node.pop("sampler")
    extra: dict[str, Any] = {}
    book: Recorded | None = None
    if spec.sweep.multi and spec.sweep.constraints and constrained_sampler({**node, "sampler": sampler_node}):
        extra, book = sampler_kwargs(spec.sweep.constraints)
    make = functools.partial(quietly, functools.partial(instantiate, sampler_node, spec.allowed_targets,
                                                        "searcher.sampler", **extra))
    return picklable(make), book


def restored_searcher(spec: SweepSpec, concurrency: int, state_dir: str,
                      points: list[dict[str, Any]] | None = None, generation: int = 1) -> Any:
    """A searcher that continues where an earlier sweep's left off (``extend``, nightly warm start).

    Model-based searchers (Optuna, HyperOpt) are restored from ``searcher-state-*.pkl`` in the earlier
    Tune experiment folder, so their suggestions use every finished trial. Random/grid search has no model:
    it gets a fresh random stream (seed + generation) instead of repeating the earlier samples.
    """
    if is_basic(spec):
        kwargs: dict[str, Any] = {"random_state": spec.sweep.seed + 1000 * generation,
                                  "max_concurrent": concurrency}
        if points:
            kwargs["points_to_evaluate"] = points
        return instantiate(spec.searcher, spec.allowed_targets, "searcher", **kwargs)
    searcher = build_searcher(spec, concurrency)
    with _searcher_state(state_dir) as local_dir:
        searcher.restore_from_dir(local_dir)
    return points_first(searcher, points, spec.sweep.metric) if points else searcher


def points_first(searcher: Any, points: list[dict[str, Any]], metric: str) -> Any:
    """A restored searcher that first hands out ``points`` (a warm start), then its own suggestions; each
    point's result is told to it as an evaluated point (``Searcher.add_evaluated_point``) where it takes one."""
    from ray.tune.search import ConcurrencyLimiter

    queue = [dict(p) for p in points]

    class PointsFirst(ConcurrencyLimiter):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(searcher, max_concurrent=UNLIMITED)
            self.queue = queue
            self.handed: dict[str, dict[str, Any]] = {}

        def suggest(self, trial_id: str) -> Any:
            if self.queue:
                self.handed[trial_id] = point = self.queue.pop(0)
                return dict(point)
            return super().suggest(trial_id)

        def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                              error: bool = False) -> None:
            point = self.handed.pop(trial_id, None)
            if point is None:
                super().on_trial_complete(trial_id, result=result, error=error)
                return
            value = (result or {}).get(metric)
            score = float(value) if isinstance(value, int | float) else None
            try:
                self.searcher.add_evaluated_point(point, score or 0.0, error=error or score is None)
            except Exception as exc:  # a searcher that takes no evaluated points: the point still ran
                log.info("the restored searcher does not learn from the warm-start point (%s)", exc)

    return PointsFirst()


@contextmanager
def _searcher_state(experiment_dir: str) -> Iterator[str]:
    """A local folder holding the experiment's ``searcher-state-*.pkl`` (copied alone from an object store)."""
    if not uris.is_remote(experiment_dir):
        yield experiment_dir
        return
    from sweeps.execution.levers.tune_files import SEARCHER_PREFIX

    with tempfile.TemporaryDirectory(prefix="sweeps-searcher-") as tmp:
        for name in uris.listdir(experiment_dir):
            if name.startswith(SEARCHER_PREFIX):
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(uris.read_bytes(uris.join(experiment_dir, name)))
        yield tmp


def build_scheduler(spec: SweepSpec) -> Any:
    """Ray's scheduler; with several objectives it stops trials on the primary one (Tune then has none)."""
    node = dict(spec.scheduler)
    kwargs: dict[str, Any] = {"metric": spec.sweep.metric, "mode": spec.sweep.mode} if spec.sweep.multi else {}
    if "hyperparam_mutations" in node:
        kwargs["hyperparam_mutations"] = space.to_tune(node.pop("hyperparam_mutations") or {})
    return instantiate(node, spec.allowed_targets, "scheduler", **kwargs)


def param_space(spec: SweepSpec) -> dict[str, Any]:
    return space.to_tune(spec.space, grid_choices=spec.searcher_name == "grid")
