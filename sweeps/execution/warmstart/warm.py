"""Which warm-start levers a sweep uses on the installed Ray, and why one is off: one place for run and doctor.

docs/ray.md, "Trial start-up". The levers:

- ``lean``: the lean trainer (:mod:`sweeps.execution.warmstart.lean`): Train's controller and workers on the job's
  runtime env, so they can take prestarted processes; no per-run placement-group cleaner or Data manager.
- ``pool``: warm processes prestarted on the trials' nodes while trials run (:mod:`sweeps.execution.warmstart.pool`),
  with torch and Ray Train imported ahead (embedded Ray only).
- ``reuse``: Tune's ``reuse_actors`` (a finished trial's driver process runs the next trial): off unless
  ``SWEEPS_REUSE_ACTORS=1``. Measured against it: Tune fails the *next* trial when the previous trial's
  function has not ended within ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (a trial whose node was lost), and a
  reused driver reported one Train worker's pid for three trials; the pool serves trial actors instead.

Each lever that touches Ray internals is checked against the installed Ray version (and the names it uses)
before the sweep starts; one that does not match is off, with one log line saying why, and the sweep runs
the public path. ``SWEEPS_WARM=0`` turns every lever off (the cold path, a benchmark baseline).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from sweeps.execution.levers import rayversion

log = logging.getLogger(__name__)

SWITCH = "SWEEPS_WARM"


@dataclass(frozen=True)
class Levers:
    """Which levers are on; ``why_off`` says, per lever that is off, why (for the log line and doctor)."""

    lean: bool
    pool: bool
    reuse: bool
    why_off: dict[str, str]

    def describe(self) -> str:
        on = [name for name in ("lean", "pool", "reuse") if getattr(self, name)]
        off = [f"{name} off ({why})" for name, why in self.why_off.items()]
        return "; ".join([f"warm start: {', '.join(on) or 'none'}", *off])


def switched_off() -> bool:
    return os.environ.get(SWITCH, "1") == "0"


def _internals_missing() -> str | None:
    """Why the Train V2 internals the lean trainer subclasses are not there, or None."""
    try:
        from ray.train.v2._internal.execution.controller.controller import TrainController
        from ray.train.v2._internal.execution.worker_group.worker_group import WorkerGroup
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
        from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE, _ActorClassCache
    except ImportError as exc:
        return f"a Ray Train internal moved: {exc}"
    needs = ((DataParallelTrainer, "_initialize_and_run_controller"),
             (DataParallelTrainer, "_create_default_callbacks"), (TrainController, "worker_group_cls"),
             (WorkerGroup, "_get_worker_runtime_env"), (WorkerGroup, "_create_placement_group"),
             (_ActorClassCache, "get"))
    if not isinstance(DEFAULT_ENV_VARS, dict) or not ENV_VARS_TO_PROPAGATE:
        return "Tune's trial-actor environment moved"
    missing = [f"{cls.__name__}.{name}" for cls, name in needs if not hasattr(cls, name)]
    return f"Ray Train lacks {', '.join(missing)}" if missing else None


def _pool_missing() -> str | None:
    try:
        from ray._private.grpc_utils import init_grpc_channel  # noqa: F401
        from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc  # noqa: F401
    except ImportError as exc:
        return f"Ray's node manager stub moved: {exc}"
    if not hasattr(node_manager_pb2, "PrestartWorkersRequest"):
        return "the raylet has no PrestartWorkers call"
    return None


def levers(local: bool) -> Levers:
    """The levers for a sweep on the embedded Ray (``local``) or a remote cluster, on the installed Ray."""
    if switched_off():
        why = f"{SWITCH}=0"
        return Levers(False, False, False, {"lean": why, "pool": why, "reuse": why})
    why_off: dict[str, str] = {}
    if reason := rayversion.unchecked():
        why_off["lean"] = why_off["pool"] = reason
    else:
        if reason := _internals_missing():
            why_off["lean"] = reason
        if reason := _pool_missing():
            why_off["pool"] = reason
    if "pool" not in why_off and "lean" in why_off:
        why_off["pool"] = "needs the lean trainer (Train's own processes never take prestarted ones)"
    why_off["reuse"] = "opt-in (SWEEPS_REUSE_ACTORS=1): Tune fails the next trial when a reused driver is slow to end"
    return Levers("lean" not in why_off, "pool" not in why_off, False, why_off)


_current: Levers | None = None


def current(local: bool) -> Levers:
    """This process's levers, decided once (when Ray starts) and logged in one line."""
    global _current
    if _current is None:
        _current = levers(local)
        quiet = set(_current.why_off) <= {"reuse"} or switched_off()
        (log.info if quiet else log.warning)("%s", _current.describe())
    return _current
