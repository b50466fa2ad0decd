"""Lever ``state_api_address``: ``RAY_API_SERVER_ADDRESS`` names the embedded Ray's dashboard to its own processes.

Train's per-run placement-group cleaner (Ray's public path) finds its cluster's State API with no address;
when another Ray runs on the same host (a second sweep, a test) that lookup fails with "Found multiple active
Ray instances", the cleaner stops, and the worker group of every trial a scheduler stopped keeps its CPUs.
Ray's address lookup (``ray.dashboard.utils.get_address_for_submission_client``, documented for the Jobs CLI)
honours ``RAY_API_SERVER_ADDRESS`` first; that the cleaner goes through it is Ray's internal behaviour.
Fallback: the variable is not set (one embedded Ray per host is then safe).
"""

from __future__ import annotations

import inspect
from typing import Any

from sweeps.execution.levers.core import Lever, binds, first, source_says

VARIABLE = "RAY_API_SERVER_ADDRESS"
STATE_CLIENT = "ray.util.state.api"  # the State API client that Train's cleaner uses


def check(lookup: Any) -> str | None:
    """Ray's address lookup takes the State API client's call (an address, None for "find it") and reads the
    variable."""
    if lookup is None:
        return "Ray's State API address lookup moved"
    if problem := binds(lookup, None):
        return problem
    source = inspect.getsource(lookup)
    return None if VARIABLE in source else f"Ray's address lookup no longer reads {VARIABLE}"


def _probe() -> str | None:
    from ray.dashboard import utils

    return first(check(getattr(utils, "get_address_for_submission_client", None)),
                 source_says(STATE_CLIENT, "get_address_for_submission_client(address)"))


LEVER = Lever(name="state_api_address", package="ray", checked=("2.53.", "2.60."),
              what="the embedded Ray's processes find its dashboard by RAY_API_SERVER_ADDRESS (Train's cleaner)",
              fallback="the variable is not set; Train's cleaner looks the cluster up itself", probe=_probe)
