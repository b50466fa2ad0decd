"""Lever ``lean_trainer``: Train V2's controller and workers on the job's runtime env, so they take warm processes.

docs/ray.md, "Trial start-up". The classes (subclasses of Train V2 internals) are in
:mod:`sweeps.execution.levers._lean`, imported only once this lever applies. Fallback: Ray's own
``TorchTrainer`` (a fresh interpreter per Train process, Train's own placement-group cleaner and Data manager).
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, first, has, importable, takes

INTERNALS = (
    "ray.train.v2._internal.callbacks.datasets", "ray.train.v2._internal.callbacks.placement_group_callback",
    "ray.train.v2._internal.constants", "ray.train.v2._internal.execution.callback",
    "ray.train.v2._internal.execution.controller.controller",
    "ray.train.v2._internal.execution.worker_group.placement_group_handle",
    "ray.train.v2._internal.execution.worker_group.worker_group",
)


def _probe() -> str | None:
    if problem := importable(INTERNALS):
        return problem
    import dataclasses

    import ray._raylet
    from ray.train.v2._internal.execution.controller.controller import TrainController
    from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup, WorkerGroupContext
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.util.placement_group import placement_group

    fields = {f.name for f in dataclasses.fields(WorkerGroupContext)}
    wanted = {"resources_per_worker", "num_workers", "placement_strategy", "label_selector"}
    return first(
        has(DataParallelTrainer, "_initialize_and_run_controller", "_create_default_callbacks"),
        has(TrainController, "worker_group_cls"),
        takes(WorkerGroup._get_worker_runtime_env, "custom_runtime_env"),
        takes(WorkerGroup._create_placement_group, "scaling_config", "worker_group_context"),
        takes(placement_group, "bundles", "strategy", "bundle_label_selector", "name"),
        has(ray._raylet, "RAY_NODE_ID_KEY"),
        None if wanted <= fields else f"WorkerGroupContext lacks {', '.join(sorted(wanted - fields))}",
    )


LEVER = Lever(
    name="lean_trainer", package="ray", checked=("2.60.",),
    what="Train's controller and workers start on the job's runtime env (warm processes; no per-run cleaner "
         "or Data manager)",
    fallback="Ray's own TorchTrainer: a fresh interpreter per Train process", probe=_probe)


def _probe_in_trial() -> str | None:
    if problem := _probe():
        return problem
    import inspect

    from ray.train.v2._internal.execution.controller.controller import TrainController

    return first(
        has(TrainController, "run", "get_result"),
        None if inspect.iscoroutinefunction(TrainController.run) else "TrainController.run is no coroutine",
        None if not inspect.iscoroutinefunction(TrainController.get_result) else "TrainController.get_result "
        "is a coroutine",
    )


IN_TRIAL = Lever(
    name="controller_in_trial", package="ray", checked=("2.60.",),
    what="the lean trainer runs Train's controller in the trial actor's own process (one process less per "
         "trial start)",
    fallback="the lean trainer's controller is an actor of its own (a warm process)", probe=_probe_in_trial)


def trainer(pg_name: str) -> tuple[type, list[Any]]:
    """The lean trainer class (its controller in this process where the ``controller_in_trial`` lever applies)
    and the callback that names its worker group's placement group ``pg_name``."""
    from sweeps.execution.levers import _lean, core

    cls = _lean.InTrialTorchTrainer if core.applies(IN_TRIAL) else _lean.LeanTorchTrainer
    return cls, [_lean.PlacementGroupName(pg_name)]


def in_trial() -> bool:
    """Whether the lean trainer's controller runs in the trial actor's process (one process less per start)."""
    from sweeps.execution.levers import core

    return core.applies(LEVER) and core.applies(IN_TRIAL)


def added_env(job_env_vars: dict[str, str] | None) -> dict[str, str]:
    """What Train would add to its processes' environment beyond what the job gives them (empty: lean is safe)."""
    from sweeps.execution.levers import _lean

    return _lean.added_env(job_env_vars)
