"""The schedule lock: one run of a schedule at a time, across processes (an ``flock`` with its holder).

The kernel's ``flock`` is the lock; the JSON in the file only names the holder for messages. Whether a stale
holder's process is gone is said only when :func:`sweeps.lease.running` can prove it (same pid namespace,
same process start time): a pid alone says nothing across containers that share a hostname.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sweeps import lease
from sweeps.errors import Locked
from sweeps.ops import schedule

log = logging.getLogger(__name__)


def _holder_text(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = "an unknown time"
    if isinstance(started, int | float):
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started))
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when}"


def _read_holder(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        data = json.loads(raw.decode() or "{}")
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


def _gone(info: dict[str, Any]) -> bool:
    """Whether the recorded holder's process provably exited (False when this process cannot tell)."""
    pid = info.get("pid")
    holder = lease.Holder(str(info.get("host", "")), pid if isinstance(pid, int) else None,
                          str(info.get("token", "")), str(info.get("proc", "")))
    return lease.running(holder) is False


@contextmanager
def schedule_lock(name: str) -> Iterator[dict[str, Any]]:
    """Hold ``$SWEEPS_HOME/locks/<name>.lock`` (an ``flock``) while the body runs.

    The file holds JSON about the holder (pid, host, token, proc, start time). The kernel drops an ``flock``
    when its process dies, so a lock file left by a dead process is simply taken over (and said so).

    Raises:
        Locked: another live process holds it; the message names its pid and start time.
    """
    path = schedule.locks_dir() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder: dict[str, Any] = {}
            for _ in range(10):  # the holder writes its JSON right after taking the lock
                holder = _read_holder(fd)
                if holder:
                    break
                time.sleep(0.05)
            raise Locked(f"schedule {name}: another run holds the lock ({_holder_text(holder)}; lock file "
                         f"{path}); this run exits without starting a sweep") from None
        old = _read_holder(fd)
        if old.get("pid"):
            log.warning("schedule %s: taking over a stale lock left by %s (%s)", name, _holder_text(old),
                        "process is gone" if _gone(old) else "it no longer holds the lock")
        me = lease.me()
        info = {"pid": me.pid, "host": me.host, "token": me.token, "proc": me.proc, "started": time.time(),
                "schedule": name}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        try:
            yield info
        finally:
            os.ftruncate(fd, 0)  # empty = released cleanly; the file stays (unlinking races with openers)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
