"""A trial start's clock, on the trial's side: wall-clock points that ride along with its first report.

Every start of a trial (the first, a retry, a PBT restart, a resume) carries, in its first report only, the
points it passed on the way, under :data:`KEY` (a dict of ``time.time()`` values, never a metric):

- ``fit`` (the trial driver, :mod:`sweeps.execution.train.trial`): ``TorchTrainer.fit()`` called; with
  ``pg_wait_s``, how long GCS took to place the trial actor's placement group (``ray.util.placement_group_table``;
  0 for a group this process reported before: a trial actor Tune reused waited for no room);
- ``controller`` (the Train controller, :func:`sweeps.execution.train.bridge.bridge_callback`): the controller
  took its callbacks, i.e. its actor is up;
- ``loop`` and ``forward`` (rank 0 of the Train workers, :func:`arm_worker`): the loop began; its model's first
  forward pass began (torch's global forward pre-hook, removed once it fired); with ``workers_pg_wait_s``, how
  long GCS took to place the worker group's placement group (the wait for room on a busy cluster);
- ``report`` (the trial driver): the first report left for Tune.

The sweep's driver (:mod:`sweeps.execution.run.startup`) turns them into ``startup/<stage>_s`` metrics.
Nothing here imports torch or Ray at module level: it runs in the controller and the workers too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

KEY = "_sweeps_startup"


def add(metrics: dict[str, Any], **points: float) -> dict[str, Any]:
    """``metrics`` with ``points`` added under :data:`KEY` (a copy: the caller's dict is left alone)."""
    out = dict(metrics)
    out[KEY] = {**(out.get(KEY) or {}), **points}
    return out


_reported: set[str] = set()  # the placement groups whose wait this process reported (a reused actor's is old)


def pg_wait_s() -> float | None:
    """Seconds GCS took to create this actor's placement group (from its request to its placement), or None
    outside one; 0 for a group whose wait this process reported already (Tune reused the actor: the group was
    placed for an earlier trial)."""
    import ray
    import ray.util

    if not ray.is_initialized():  # outside Ray (ray.util would start one)
        return None
    try:
        pg = ray.util.get_current_placement_group()
        if pg is None:
            return None
        if pg.id.hex() in _reported:
            return 0.0
        stats = ray.util.placement_group_table(pg).get("stats") or {}
        waited = float(stats["end_to_end_creation_latency_ms"]) / 1000.0
    except Exception:  # noqa: BLE001 - a figure we cannot read is left out, never a failed trial
        return None
    _reported.add(pg.id.hex())
    return waited


def _first_forward(points: dict[str, float]) -> Callable[[], None]:
    """Stamp ``points["forward"]`` at the first forward pass of any torch module in this process; returns the
    undo (also done by the hook itself once it fired). No torch installed: nothing to stamp."""
    try:
        from torch.nn.modules.module import register_module_forward_pre_hook
    except ImportError:
        return lambda: None
    handle: Any = None

    def hook(module: Any, args: Any) -> None:
        points.setdefault("forward", time.time())
        handle.remove()

    handle = register_module_forward_pre_hook(hook)
    return handle.remove  # type: ignore[no-any-return]


def arm_worker(rank: int, loop_start: float, skip: str, group: bool = True) -> Callable[[], None]:
    """In a Train worker, before its loop (begun at ``loop_start``): rank 0's first ``ray.train.report`` (but
    one whose metrics hold ``skip``: sweeps' own seeding report) carries the loop's start and its first forward
    pass, and (``group``) the wait for the worker group's placement group; a loop in the trial's own process has
    none (its trial's wait is the trial's). ``ray.train.report`` is wrapped for the loop's run (a loop imported
    after this, even with ``from ray.train import report``, calls the wrapper); returns the undo."""
    import ray.train

    if rank != 0:
        return lambda: None
    points = {"loop": loop_start}
    unhook = _first_forward(points)
    original = ray.train.report
    sent = False

    def report(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        nonlocal sent
        if not sent and skip not in metrics:
            sent = True
            unhook()
            waited = pg_wait_s() if group else None  # the worker group's own: read after the first epoch
            metrics = add(metrics, **points, **({} if waited is None else {"workers_pg_wait_s": waited}))
        return original(metrics, *args, **kwargs)

    ray.train.report = report

    def undo() -> None:
        unhook()
        if ray.train.report is report:
            ray.train.report = original

    return undo
