"""Liveness of a driver process: who owns a sweep or a run (host + pid + a lease), and whether it still lives.

A pid alone means nothing on a cluster or with a shared ``$SWEEPS_HOME``: every record names its host, and a
running driver renews a lease (an expiry time) every ``LEASE_S / 4`` seconds. On the owner's host the pid
decides together with the lease; from any other host only the lease does.
"""

from __future__ import annotations

import os
import socket
import time

LEASE_S = 60.0  # how long a driver's claim lasts without renewal; it renews every LEASE_S / 4


def host() -> str:
    return socket.gethostname()


def driver_id() -> str:
    """``host:pid`` of this process: the owner recorded on the runs and sweeps it opens."""
    return f"{host()}:{os.getpid()}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def expiry(now: float | None = None) -> float:
    """The lease expiry to record now."""
    return (time.time() if now is None else now) + LEASE_S


def owner_alive(owner_host: str | None, pid: int | None, expires: float | None, now: float | None = None) -> bool:
    """Whether the owner of a sweep or a run may still be running.

    On this host: its pid exists and its lease (when one was recorded) has not expired. On another host: its
    lease has not expired; with no lease recorded (a driver older than leases) it is not ours to judge.
    """
    now = time.time() if now is None else now
    live_lease = expires is None or expires > now
    if owner_host in (None, host()):
        return pid is not None and pid != os.getpid() and pid_alive(pid) and live_lease
    return expires is None or expires > now


def parse_driver(driver: str) -> tuple[str, int | None]:
    """``host:pid`` -> (host, pid); a malformed tag gives (tag, None)."""
    h, _, pid = driver.rpartition(":")
    return (h, int(pid)) if h and pid.isdigit() else (driver, None)


def alive_here(driver: str) -> bool:
    """For a ``host:pid`` owner with no lease known: False only when it is on this host and its process is gone."""
    h, pid = parse_driver(driver)
    if h != host() or pid is None:
        return True  # another machine's driver: not ours to judge without a lease
    return pid_alive(pid)
