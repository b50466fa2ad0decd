"""Free TCP ports for the servers sweeps starts (the embedded dashboard, MLflow), never one of Ray's own defaults.

A port drawn from the OS's ephemeral range can be 52365, the Ray dashboard agent's fixed default: a dashboard
given that port makes ``ray.init`` refuse ("used by other components"), and a server holding it blocks the
agent of a Ray started later on the same host. The draw is repeated until it is none of Ray's fixed ports.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365})  # GCS, dashboard, client server, dashboard agent HTTP


def _ephemeral(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port(host: str = "127.0.0.1", draw: Callable[[], int] | None = None) -> int:
    """A port that nothing listens on right now (the OS picks it), other than Ray's fixed default ports."""
    pick = draw or (lambda: _ephemeral(host))
    while (port := pick()) in RAY_DEFAULT_PORTS:
        pass
    return port
