"""Lever ``gcs_tables``: free resources per node and other jobs' live actors, for the stall watchdog's story.

Both come from GCS tables behind Ray's private ``ray._private.state`` (no dashboard needed). Fallback: the
story says '?' for a node's free resources and leaves other jobs' actors out.
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, binds, first, has


def check(state: Any) -> str | None:
    """Ray's state module takes the calls this lever makes."""
    return first(has(state, "available_resources_per_node", "actors"),
                 binds(getattr(state, "available_resources_per_node", None)),
                 binds(getattr(state, "actors", None), actor_state_name="ALIVE"))


def _probe() -> str | None:
    from ray._private import state

    return check(state)


LEVER = Lever(name="gcs_tables", package="ray", checked=("2.60.",),
              what="free resources per node and other jobs' actors, read from the GCS (the stall story)",
              fallback="the stall story says '?' for free resources", probe=_probe)


def free_per_node() -> dict[str, dict[str, float]]:
    from ray._private import state

    return dict(state.available_resources_per_node())


def other_jobs_actors(job_id: str) -> int:
    from ray._private import state

    table = state.actors(actor_state_name="ALIVE") or {}
    return sum(1 for a in table.values() if a.get("JobID") != job_id and not a.get("IsDetached"))
