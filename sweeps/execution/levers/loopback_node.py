"""Lever ``loopback_node``: the embedded Ray's node address 127.0.0.1, so every Ray listener is on loopback.

Every Ray component binds by its node IP, and ``ray.init(_node_ip_address="127.0.0.1")`` is turned back into
the routable address. Ray's own switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is read into the private
``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` at import, so the constant is set too (docs/security.md).
Fallback: Ray's listeners on the node's address (the record's and the report's listeners line says so).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from sweeps.execution.levers.core import Lever, first, has

SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_saved: list[tuple[str | None, Any]] = []


def check(constants: Any, services: Any) -> str | None:
    """The switch is a bool constant that Ray's node-address lookup reads on every call (not a copy taken at
    import), so setting it here moves every listener Ray starts."""
    if problem := first(has(constants, "ENABLE_RAY_CLUSTER"), has(services, "get_node_ip_address")):
        return problem
    if not isinstance(constants.ENABLE_RAY_CLUSTER, bool):
        return f"ENABLE_RAY_CLUSTER is {type(constants.ENABLE_RAY_CLUSTER).__name__}, not bool"
    source = inspect.getsource(services.get_node_ip_address)
    return None if "ENABLE_RAY_CLUSTER" in source else "Ray's node-address lookup no longer reads ENABLE_RAY_CLUSTER"


def _probe() -> str | None:
    import ray._private.ray_constants as rc
    import ray._private.services as services

    return check(rc, services)


LEVER = Lever(name="loopback_node", package="ray", checked=("2.60.",),
              what="the embedded Ray's node address is 127.0.0.1 (every Ray listener on loopback)",
              fallback="Ray listens on the node's address", probe=_probe)


def enter() -> None:
    """Node IP 127.0.0.1 for this process and every process it starts (undone by :func:`leave`)."""
    import ray._private.ray_constants as rc

    _saved.append((os.environ.get(SWITCH), rc.ENABLE_RAY_CLUSTER))
    os.environ[SWITCH] = "0"
    rc.ENABLE_RAY_CLUSTER = False  # services.get_node_ip_address reads it per call


def leave() -> None:
    """The environment as it was before :func:`enter` (a later remote connection is unaffected)."""
    if not _saved:
        return
    import ray._private.ray_constants as rc

    env, const = _saved.pop()
    if env is None:
        os.environ.pop(SWITCH, None)
    else:
        os.environ[SWITCH] = env
    rc.ENABLE_RAY_CLUSTER = const
