"""Lever ``job_entrypoint``: whether this driver is a Ray Job's entrypoint (``ray job submit``, a KubeRay RayJob).

Ray's job supervisor starts the entrypoint with the job's config in ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (a name of
``ray._private.runtime_env.constants``, set in ``job_supervisor.py``); no public call says a driver is a job's.
The sweep's live status names who launched its driver (``launched_by``: ``ray job`` here). Fallback: the status
says what ``SWEEPS_LAUNCHED_BY`` says (``cli`` when unset). (The job's runtime env is merged with the sweep's
through Ray's documented ``RAY_OVERRIDE_JOB_RUNTIME_ENV``, set for every remote sweep: no detection needed.)
"""

from __future__ import annotations

import os

from sweeps.execution.levers.core import Lever, applies, first, source_says

NAME = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _probe() -> str | None:
    from ray._private.runtime_env import constants

    if getattr(constants, NAME, None) != NAME:
        return f"ray._private.runtime_env.constants.{NAME} moved"
    return first(source_says("ray.dashboard.modules.job.job_supervisor", f"{NAME}: json.dumps("))


LEVER = Lever(name="job_entrypoint", package="ray", checked=("2.53.", "2.60."),
              what="a driver that is a Ray Job's entrypoint is told apart (status: launched by 'ray job')",
              fallback="the status says who launched the driver from SWEEPS_LAUNCHED_BY alone ('cli' in a job)",
              probe=_probe)


def in_job() -> bool:
    """This process is a Ray Job's entrypoint (where the lever applies; else False)."""
    return NAME in os.environ and applies(LEVER)
