"""The lean trainer's classes: Ray Train V2 internals subclassed (imported only once the lever applies).

docs/ray.md, "Trial start-up". Train V2 starts its controller and workers with a runtime env of their own
(``{"env_vars": ...}``), so the raylet never hands them an idle process (its runtime-env hash is not the
job's) and each pays a second interpreter (``setup_worker.py``). When every variable Train would propagate
already reaches those processes through the job (the embedded Ray's processes inherit the driver's
environment; a remote job's ``runtime_env`` carries them), the lean trainer starts the controller and the
workers with the job's runtime env, and leaves out what a sweep does not use: Train's detached per-run
placement-group cleaner (the sweep frees its trials' groups itself, :mod:`sweeps.execution.warmstart.reaper`) and the
Ray Data manager of a trial without datasets. Its worker group's placement group is named after the sweep,
the trial and the run, so the reaper finds it with ``ray.util.placement_group_table()`` (no State API).

This module imports Train V2 internals at import time: only :mod:`sweeps.execution.levers.lean_trainer`
imports it, once its lever applies. Anything else gets a plain ``TorchTrainer``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import ray
from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.constants import get_env_vars_to_propagate
from ray.train.v2._internal.execution.callback import WorkerGroupCallback
from ray.train.v2._internal.execution.controller.controller import TrainController
from ray.train.v2._internal.execution.worker_group.placement_group_handle import DefaultPlacementGroupHandle
from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup
from ray.util.placement_group import placement_group

log = logging.getLogger(__name__)

WARN_ASYNC_GET = "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"  # Train always sets it on its controller


class PlacementGroupName(WorkerGroupCallback):  # type: ignore[misc]
    """Carries the name the worker group's placement group gets (``sweeps.execution.warmstart.reaper.pg_name``)."""

    def __init__(self, name: str) -> None:
        self.name = name


class LeanWorkerGroup(WorkerGroup):  # type: ignore[misc]
    """Workers with the job's runtime env (when nothing is added to it) in a named placement group."""

    @staticmethod
    def _get_worker_runtime_env(custom_runtime_env: Any) -> Any:
        if custom_runtime_env:  # the user's own worker runtime env: Train's merge, as it is
            return WorkerGroup._get_worker_runtime_env(custom_runtime_env)
        return {}

    def _create_placement_group(self, scaling_config: Any, worker_group_context: Any) -> Any:
        name = next((cb.name for cb in self._callbacks if isinstance(cb, PlacementGroupName)), "")
        if not name or scaling_config.use_tpu:
            return super()._create_placement_group(scaling_config, worker_group_context)
        pg = placement_group(
            bundles=[worker_group_context.resources_per_worker] * worker_group_context.num_workers,
            strategy=worker_group_context.placement_strategy,
            bundle_label_selector=worker_group_context.label_selector,
            name=name,
        )
        return DefaultPlacementGroupHandle(pg)


class LeanController(TrainController):  # type: ignore[misc]
    worker_group_cls = LeanWorkerGroup


class LeanTorchTrainer(TorchTrainer):  # type: ignore[misc]
    """``TorchTrainer`` with the controller and workers on the job's runtime env (see the module's doc)."""

    def _create_default_callbacks(self) -> list[Any]:
        drop: tuple[type, ...] = (PlacementGroupCleanerCallback,)
        if not self.datasets:
            drop += (DatasetsCallback,)  # it starts a DatasetManager actor per run, datasets or not
        return [cb for cb in super()._create_default_callbacks()  # type: ignore[misc]
                if not isinstance(cb, drop)]

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        controller_cls = ray.remote(
            num_cpus=0,
            # on the driver's node, as Train does: the bridge's Unix socket is there
            label_selector={ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()},  # type: ignore[attr-defined]
        )(LeanController)
        controller: Any = controller_cls.remote(**controller_init_kwargs)
        ray.get(controller.run.remote())
        return ray.get(controller.get_result.remote())


def added_env(job_env_vars: dict[str, str] | None) -> dict[str, str]:
    """What Train would add to its processes' environment beyond what the job gives them (empty: lean is safe).

    ``job_env_vars`` is the job runtime env's ``env_vars`` on a remote cluster, or None on the embedded Ray,
    whose processes inherit this process's environment.
    """
    wanted = {**get_env_vars_to_propagate(), WARN_ASYNC_GET: os.environ.get(WARN_ASYNC_GET, "0")}
    have = dict(os.environ) if job_env_vars is None else job_env_vars
    return {k: v for k, v in wanted.items() if have.get(k) != v}


class InTrialTorchTrainer(LeanTorchTrainer):  # type: ignore[misc]
    """The lean trainer with Train's controller run in this process (the trial actor's), not an actor of its own:
    one process less per trial start, and no lease or import of one. The controller's async control loop runs
    on an event loop of its own in the calling thread (``fit()`` runs in the trial's fit thread); a callback
    with ``controller_started(at)`` (the bridge) is told when the controller was made. Train hands its workers
    the calling actor as "the controller": ``ray.train.get_all_reported_checkpoints()`` in a loop (which asks
    the controller actor) needs the lever off. Outside an actor, the controller is an actor of its own."""

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        if ray.get_runtime_context().get_actor_id() is None:  # Train hands its workers the controller's actor
            return super()._initialize_and_run_controller(**controller_init_kwargs)
        controller = LeanController(**controller_init_kwargs)
        made = time.time()
        for cb in self.run_config.callbacks or []:  # the user's callbacks, as the controller holds them
            started = getattr(cb, "controller_started", None)
            if callable(started):
                started(made)
        asyncio.run(controller.run())
        return controller.get_result()
