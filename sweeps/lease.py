"""Who holds a sweep, a run or a lock (a random token per process), and whether that holder may still be running.

Hostname and pid identify nothing across machines: containers and CI runners share hostnames, and pids repeat
in every pid namespace. So every process draws a random token once (``me().token``) and records it next to
its host and pid; "is this still mine" compares tokens, never host and pid. Whether a holder still runs is
decided by its lease (an expiry time, renewed every ``LEASE_S / 4`` seconds), with one fast path: when the
record proves that the holder's pid lives in this process's pid space (the same boot id and the same pid
namespace) and names the start time of that pid, the pid decides at once (gone, or still the same process).
Records written before tokens (a bare ``host:pid``) are judged by their lease alone.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

LEASE_S = float(os.environ.get("SWEEPS_LEASE_S") or 60.0)  # how long a driver's claim lasts without renewal (it
# renews every LEASE_S / 4); SWEEPS_LEASE_S shortens it where a gone driver must be seen sooner (tests)


@dataclass(frozen=True)
class Holder:
    """One process that holds something: ``token`` is what identifies it; host and pid are for people.

    ``proc`` is ``<boot id>/<pid namespace inode>/<start time of pid in clock ticks>``: where ``pid`` means
    something, and which process it meant; empty when unknown (another OS, a ``/proc`` of another namespace).
    """

    host: str
    pid: int | None
    token: str = ""  # empty: written before tokens
    proc: str = ""

    def label(self) -> str:
        """``host:pid``, for messages."""
        return f"{self.host}:{self.pid if self.pid is not None else '?'}"

    def text(self) -> str:
        """The holder as one tag value: ``host:pid token=HEX proc=BOOT/NS/START``."""
        out = self.label()
        if self.token:
            out += f" token={self.token}"
        if self.proc:
            out += f" proc={self.proc}"
        return out

    @classmethod
    def parse(cls, text: str) -> Holder:
        """The inverse of :meth:`text`; a bare ``host:pid`` (older versions) gives a holder without a token."""
        first, *rest = (text or "").split() or [""]
        h, _, pid = first.rpartition(":")
        fields = dict(part.partition("=")[::2] for part in rest)
        if not (h and pid.isdigit()):
            return cls(first, None, fields.get("token", ""), fields.get("proc", ""))
        return cls(h, int(pid), fields.get("token", ""), fields.get("proc", ""))

    def mine(self) -> bool:
        """Whether this process is the holder (its token; host and pid prove nothing)."""
        return bool(self.token) and self.token == me().token


_ME: Holder | None = None


def me() -> Holder:
    """This process as a holder: its token is drawn once per process (again in a forked child)."""
    global _ME
    if _ME is None or _ME.pid != os.getpid():
        _ME = Holder(host(), os.getpid(), uuid.uuid4().hex, proc_of(os.getpid()))
    return _ME


def host() -> str:
    return socket.gethostname()


def driver_id() -> str:
    """This process as recorded on the runs and sweeps it opens (:meth:`Holder.text`)."""
    return me().text()


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists in this pid namespace (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_space() -> str:
    """``<boot id>/<pid namespace inode>`` of this process, or "" when ``/proc`` cannot vouch for its pids.

    ``/proc`` mounted for another pid namespace (``unshare -p`` without ``--mount-proc``) would describe other
    processes than ``os.kill`` reaches: then there is no fast path. A time namespace shifts the start times
    that ``/proc`` shows, so its inode is part of the space too (where the kernel has them).
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
        with open("/proc/self/stat") as f:
            own = int(f.read().split(" ", 1)[0])
    except (OSError, ValueError):
        return ""
    try:
        ns += f"+{os.stat('/proc/self/ns/time').st_ino}"
    except OSError:
        pass  # a kernel without time namespaces (before 5.6)
    return f"{boot}/{ns}" if boot and own == os.getpid() else ""


def proc_of(pid: int) -> str:
    """:attr:`Holder.proc` of the process ``pid`` of this pid space ("" when ``/proc`` cannot tell)."""
    space, start = pid_space(), _start_time(pid)
    return f"{space}/{start}" if space and start else ""


def _start_time(pid: int) -> str | None:
    """When the process ``pid`` started (clock ticks since boot, ``/proc/PID/stat`` field 22); None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name (field 2) may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def running(h: Holder) -> bool | None:
    """True: provably still that process; False: provably gone; None: this process cannot tell.

    Only when the record names this boot and this pid namespace: the pid then means the same process here,
    and its start time tells a reused pid from the holder.
    """
    space, _, start = h.proc.rpartition("/")
    if h.pid is None or not space or not start or space != pid_space():
        return None
    now = _start_time(h.pid)
    if now is None:
        return None if pid_alive(h.pid) else False  # hidden from us (hidepid) is not gone
    return now == start


def expiry(now: float | None = None) -> float:
    """The lease expiry to record now."""
    return (time.time() if now is None else now) + LEASE_S


def alive(h: Holder, expires: float | None, now: float | None = None) -> bool:
    """Whether the holder may still be running (this process included).

    Provably the same process in this pid space: alive while its lease (when recorded) lasts; provably gone:
    dead at once. Otherwise its lease decides; with no lease recorded it is not ours to judge (alive).
    """
    now = time.time() if now is None else now
    live_lease = expires is None or expires > now
    proof = running(h)
    return live_lease if proof is None else proof and live_lease


def owner_alive(h: Holder, expires: float | None, now: float | None = None) -> bool:
    """Whether another process (not this one) may still own a sweep or a run."""
    return not h.mine() and alive(h, expires, now)
