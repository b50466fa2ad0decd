"""Lever ``raylet_config``: settings of the embedded Ray's raylet that ``ray.init`` takes only as ``_system_config``.

``preload_python_modules`` (warm processes import torch and Ray Train before work) and
``prestart_worker_first_driver`` (the benchmark switch ``SWEEPS_PRESTART=0``) are raylet settings with no
public argument. Fallback: Ray's defaults (no preload; Ray prestarts for the first driver).

Ray checks ``_system_config`` nowhere in Python: the GCS server, the raylet and every worker each parse it with
their C++ ``RayConfig::initialize`` (``src/ray/common/ray_config.cc``, over the list in ``ray_config_def.h``,
which the wheel does not ship), and a key not on that list, or a value of the wrong type, is a fatal abort. In
``ray.init`` that is a GCS server that dies at once and a ``RuntimeError`` ("Timed out waiting for file
.../gcs_server_port") 30 s later. So the probe hands the widest config this lever passes to the same
``RayConfig::initialize`` (``ray._raylet.Config.initialize``, compiled from the same list in the same wheel) in a
child Python process (~0.7 s, no Ray started): a refusal there is the lever off, one log line, Ray's defaults.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from sweeps.execution.levers.core import Lever, first, has, takes

PRELOAD = ("torch", "torch.distributed", "ray.train.torch")  # what a Train worker and controller import
CHECK_TIMEOUT_S = 60.0
# The child reads the config from stdin so that no value needs quoting; RayConfig aborts the child on a refusal.
_CHECK = "import sys; from ray._raylet import Config; Config.initialize(sys.stdin.read())"


def settings(preload: bool, prestart_first_driver: bool = True) -> dict[str, Any]:
    """The ``_system_config`` for those settings (empty when Ray's defaults are wanted)."""
    config: dict[str, Any] = {}
    if preload:
        config["preload_python_modules"] = list(PRELOAD)
    if not prestart_first_driver:
        config["prestart_worker_first_driver"] = False
    return config


def refused(config: Mapping[str, Any], python: str = sys.executable) -> str | None:
    """Why the Ray installed for ``python`` refuses ``config`` as ``_system_config`` (an unknown key, a value of the
    wrong type: its own ``RayConfig`` says which), or None when it takes it."""
    try:
        done = subprocess.run([python, "-c", _CHECK], input=json.dumps(dict(config)), capture_output=True,
                              text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Ray's RayConfig could not be asked about {sorted(config)} ({type(exc).__name__}: {exc})"
    if done.returncode == 0:
        return None
    return f"Ray's RayConfig refuses {sorted(config)}: {_said(done.stderr) or f'exit {done.returncode}'}"


def _said(stderr: str) -> str:
    """The line of a child's stderr that says why (Ray's fatal log line without its prefix, or the last line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in lines:
        found = re.search(r"\]\s+\S+\.cc:\d+:\s+(.*)", line)
        if found:
            return found.group(1)
    return lines[-1] if lines else ""


def check(config: Mapping[str, Any]) -> str | None:
    """What stands between ``ray.init(_system_config=config)`` and the embedded Ray, or None."""
    import ray
    from ray import _raylet

    return first(takes(ray.init, "_system_config"), has(_raylet, "Config"),
                 has(getattr(_raylet, "Config", None), "initialize"), refused(config))


def _probe() -> str | None:
    return check(settings(preload=True, prestart_first_driver=False))  # every key, as the lever may pass it


LEVER = Lever(name="raylet_config", package="ray", checked=("2.60.",),
              what="the embedded raylet's worker-pool settings (preload torch, prestart for the first driver)",
              fallback="Ray's defaults: processes import torch when a trial needs it", probe=_probe)


def init_kwargs(preload: bool, prestart_first_driver: bool = True) -> dict[str, Any]:
    """``ray.init`` keyword arguments for those settings (empty when Ray's defaults are wanted). Pass them only
    where ``core.applies(LEVER)``: the probe has then seen the installed Ray take every key."""
    config = settings(preload, prestart_first_driver)
    return {"_system_config": config} if config else {}
