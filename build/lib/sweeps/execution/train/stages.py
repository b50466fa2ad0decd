"""Trial start-up stage stamps for ``benchmarks/trial_overhead.py``; off unless ``$SWEEPS_STAGE_LOG`` is set.

Each stamp is one JSON line (trial id, stage, wall clock, pid, the process's own start time) appended to the
file the variable names, from whichever process reaches the stage: the trial's driver (``trial_up``,
``first_report``), the Train controller (``controller_up``, ``pg_requested``, ``workers_up``,
``process_group_ready``, ``train_fn_launched``, and Train's own debug timings as ``train_log``) and each
Train worker (``loop_start``). The controller hooks are the ``train_stages`` lever (Train V2's internal callback
classes): a measuring aid, never installed in a normal run.
"""

from __future__ import annotations

import json
import os
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


def train_callbacks() -> list[Any]:
    """The controller-side stamping callback, when stamping is on and the ``train_stages`` lever applies
    (elsewhere the driver's and the workers' own stamps remain)."""
    from sweeps.execution.levers import core, train_stages

    if not enabled() or not core.applies(train_stages.LEVER):
        return []
    return train_stages.callbacks(stamp)
