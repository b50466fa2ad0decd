"""Trial start-up stage stamps for ``benchmarks/trial_overhead.py``; off unless ``$SWEEPS_STAGE_LOG`` is set.

Each stamp is one JSON line (trial id, stage, wall clock, pid, the process's own start time) appended to the
file the variable names, from whichever process reaches the stage: the trial's driver (``trial_up``,
``first_report``), the Train controller (``controller_up``, ``pg_requested``, ``workers_up``,
``process_group_ready``, ``train_fn_launched``, and Train's own debug timings as ``train_log``) and each
Train worker (``loop_start``). The controller hooks use Train V2's internal callback classes: they are a
measuring aid, never installed in a normal run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

STAGE_ENV = "SWEEPS_STAGE_LOG"


def enabled() -> bool:
    return bool(os.environ.get(STAGE_ENV))


def process_start() -> float | None:
    """When this process was created (wall clock), from /proc; None elsewhere."""
    try:
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        boot = next(float(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def stamp(trial: str, stage: str, **extra: Any) -> None:
    path = os.environ.get(STAGE_ENV)
    if not path:
        return
    row = {"trial": trial, "stage": stage, "t": time.time(), "pid": os.getpid(), "proc_start": process_start(),
           **extra}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


_TRAIN_TIMING = re.compile(r"\[Worker Group Initialization\] (.*?) in ([0-9.]+)s")


def train_callbacks() -> list[Any]:
    """The controller-side stamping callback, when stamping is on (on a checked Ray: it subclasses Train's
    internal callbacks; elsewhere the driver's own stamps remain)."""
    from sweeps.execution.levers import rayversion

    if not enabled() or rayversion.unchecked():
        return []
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

            wg = logging.getLogger("ray.train.v2._internal.execution.worker_group.worker_group")
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
