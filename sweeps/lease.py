"""Liveness of a driver process: who owns a sweep or a run (host + pid), and whether it is still alive.

A pid alone means nothing on a cluster: every record names its host, and a process on another host is
never judged from here by its pid.
"""

from __future__ import annotations

import os
import socket


def driver_id() -> str:
    """``host:pid`` of this process: the owner recorded on the runs and sweeps it opens."""
    return f"{socket.gethostname()}:{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive_here(driver: str) -> bool:
    """For a ``host:pid`` owner: False only when it is on this host and its process is gone."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's driver: not ours to judge
    return pid_alive(int(pid))
