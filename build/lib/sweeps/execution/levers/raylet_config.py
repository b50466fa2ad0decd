"""Lever ``raylet_config``: settings of the embedded Ray's raylet that ``ray.init`` takes only as ``_system_config``.

``preload_python_modules`` (warm processes import torch and Ray Train before work) and
``prestart_worker_first_driver`` (the benchmark switch ``SWEEPS_PRESTART=0``) are raylet settings with no
public argument. Fallback: Ray's defaults (no preload; Ray prestarts for the first driver).
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, takes

PRELOAD = ("torch", "torch.distributed", "ray.train.torch")  # what a Train worker and controller import


def _probe() -> str | None:
    import ray

    return takes(ray.init, "_system_config")


LEVER = Lever(name="raylet_config", package="ray", checked=("2.60.",),
              what="the embedded raylet's worker-pool settings (preload torch, prestart for the first driver)",
              fallback="Ray's defaults: processes import torch when a trial needs it", probe=_probe)


def init_kwargs(preload: bool, prestart_first_driver: bool = True) -> dict[str, Any]:
    """``ray.init`` keyword arguments for those settings (empty when Ray's defaults are wanted)."""
    config: dict[str, Any] = {}
    if preload:
        config["preload_python_modules"] = list(PRELOAD)
    if not prestart_first_driver:
        config["prestart_worker_first_driver"] = False
    return {"_system_config": config} if config else {}
