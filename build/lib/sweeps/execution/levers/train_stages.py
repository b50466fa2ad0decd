"""Lever ``train_stages``: Train controller callbacks that stamp a trial start's stages (a measuring aid).

Train V2's controller and worker-group callback classes are internal; the stamps they add
(``controller_up``, ``pg_requested``, ``workers_up``, ...) are used only when ``$SWEEPS_STAGE_LOG`` is set
(:mod:`sweeps.execution.train.stages`). Fallback: the driver's and the workers' own stamps only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from sweeps.execution.levers.core import Lever, has, importable

_TRAIN_TIMING = re.compile(r"\[Worker Group Initialization\] (.*?) in ([0-9.]+)s")
WORKER_GROUP_LOGGER = "ray.train.v2._internal.execution.worker_group.worker_group"


def _probe() -> str | None:
    if problem := importable(("ray.train.v2._internal.execution.callback",)):
        return problem
    from ray.train.v2._internal.execution import callback

    return has(callback, "ControllerCallback", "WorkerGroupCallback")


LEVER = Lever(name="train_stages", package="ray", checked=("2.60.",),
              what="stage stamps from inside Train's controller (benchmarks only: $SWEEPS_STAGE_LOG)",
              fallback="the driver's and the workers' stamps only", probe=_probe)


def callbacks(stamp: Callable[..., None]) -> list[Any]:
    """The controller-side stamping callback; ``stamp(trial, stage, **extra)`` writes one stamp."""
    from ray.train.v2._internal.execution.callback import ControllerCallback, WorkerGroupCallback

    class Stamps(ControllerCallback, WorkerGroupCallback):  # type: ignore[misc]
        trial = "?"

        def after_controller_start(self, train_run_context: Any) -> None:
            self.trial = str(train_run_context.run_config.name).rsplit("-", 1)[0]
            stamp(self.trial, "controller_up")
            trial = self.trial

            class TrainTimings(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    m = _TRAIN_TIMING.search(record.getMessage())
                    if m:
                        stamp(trial, "train_log", what=m.group(1), seconds=float(m.group(2)))

            wg = logging.getLogger(WORKER_GROUP_LOGGER)
            wg.setLevel(logging.DEBUG)
            wg.addHandler(TrainTimings(logging.DEBUG))

        def before_worker_group_start(self, worker_group_context: Any) -> None:
            stamp(self.trial, "pg_requested")

        def before_init_train_context(self, workers: list[Any]) -> dict[str, list[Any]]:
            stamp(self.trial, "workers_up", pids=[getattr(w.metadata, "pid", None) for w in workers])
            return {}

        def after_worker_group_start(self, worker_group: Any) -> None:
            stamp(self.trial, "process_group_ready")

        def after_worker_group_training_start(self, worker_group: Any) -> None:
            stamp(self.trial, "train_fn_launched")

    return [Stamps()]
