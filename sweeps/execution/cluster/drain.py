"""Whether a cluster's nodes drain when they are told to stop (``doctor --address``, docs/cluster.md "Spot
capacity").

What a node does with SIGTERM decides whether a trial there gets a preemption notice: Ray 2.60's ``ray start
--block`` marks its node draining (reason PREEMPTION, deadline now + ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``,
default 30 s, 0 = none) and waits that long before it stops its processes; Train sees the drain and the loops
checkpoint. A ``ray start`` without ``--block`` has exited long before (nothing catches the signal), and a Ray
before 2.60 tears the node down at once. So one task per alive node (0 CPUs, pinned to it, run from a throwaway
driver in a child process: nothing stays connected) reads what the node's processes inherited: the variable, the
node's Ray, and whether a ``ray start ... --block`` is among the task's ancestors (Linux ``/proc``; "unknown"
elsewhere). What Ray cannot show is said as such: how long the machine or pod lives after SIGTERM (a pod's
``terminationGracePeriodSeconds``, a spot instance's notice) must be longer than the drain window.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DRAIN_ENV = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"  # read by `ray start --block`'s SIGTERM handler (Ray 2.60)
DEFAULT_DRAIN_S = 30.0  # Ray's default (ray/_private/ray_constants.py)
FIRST_DRAINING_RAY = (2, 60)
SURVEY_TIMEOUT_S = 90.0
# Runs as its own __main__, so the task below is pickled by value: the nodes need not have this project.
SURVEY = """
import json, logging, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ENV = sys.argv[2]

def facts():
    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\\0", b" ").decode(errors="replace")
        except OSError:
            return None
    def parent(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return 0
    block, pid, seen = None, os.getpid(), 0
    if os.path.isdir("/proc"):
        block = False
        while pid > 1 and seen < 12:
            words = (cmdline(pid) or "").split()
            if "start" in words and "--block" in words:
                block = True
                break
            pid, seen = parent(pid), seen + 1
    return {"node": ray.get_runtime_context().get_node_id(), "ray": ray.__version__, "env": os.environ.get(ENV),
            "block": block}

ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
nodes = [n for n in ray.nodes() if n.get("Alive")]
probe = ray.remote(num_cpus=0)(facts)
refs = {n["NodeID"]: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
        .remote() for n in nodes}
out = []
for n in nodes:
    row = {"node": n["NodeID"], "ip": n.get("NodeManagerAddress", ""),
           "head": "node:__internal_head__" in (n.get("Resources") or {})}
    try:
        row.update(ray.get(refs[n["NodeID"]], timeout=float(sys.argv[3])))
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"
    out.append(row)
print(json.dumps({"nodes": out}))
"""


@dataclass(frozen=True)
class NodeDrain:
    """What one node's processes inherited, and what it means for a SIGTERM there."""

    node: str
    ip: str
    head: bool
    ray: str = ""
    env: str | None = None  # RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S as the node's processes see it (None: unset)
    block: bool | None = None  # a `ray start --block` among its processes' ancestors (None: not observable)
    error: str = ""

    @property
    def window_s(self) -> float | None:
        """The drain window a SIGTERM opens (None: unreadable)."""
        if self.env is None:
            return DEFAULT_DRAIN_S
        try:
            return float(self.env)
        except ValueError:
            return None

    def verdict(self) -> tuple[bool | None, str]:
        """(drains?, why): True, False, or None where it cannot be told."""
        if self.error:
            return None, f"not observed ({self.error})"
        if _ray_tuple(self.ray) < FIRST_DRAINING_RAY:
            return False, f"Ray {self.ray} stops a node at once on SIGTERM (its drain on SIGTERM came in 2.60)"
        if self.block is False:
            return False, "not started by `ray start --block`: nothing there turns a SIGTERM into a drain"
        window = self.window_s
        if window is None:
            return None, f"{DRAIN_ENV}={self.env!r} is no number"
        if window <= 0:
            return False, f"{DRAIN_ENV}={self.env}: SIGTERM stops the node at once"
        source = f"{DRAIN_ENV}={self.env}" if self.env is not None else f"{DRAIN_ENV} unset: Ray's default"
        how = "`ray start --block`" if self.block else "started by `ray start` (whether with --block: unknown)"
        return (True if self.block else None), f"{how} drains for {window:g} s on SIGTERM ({source})"


def _ray_tuple(version: str) -> tuple[int, int]:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def survey(address: str, timeout_s: float = SURVEY_TIMEOUT_S) -> list[NodeDrain]:
    """Every alive node's facts, by a throwaway driver in a child process.

    Raises:
        RuntimeError: the child could not connect or said nothing readable.
    """
    try:
        done = subprocess.run([sys.executable, "-c", SURVEY, address, DRAIN_ENV, str(timeout_s / 3)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"no answer from the cluster at {address} within {timeout_s:.0f} s") from exc
    said: dict[str, Any] = {}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            said = json.loads(line)
            break
    if "nodes" not in said:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"could not ask the cluster's nodes ({tail})")
    fields = set(NodeDrain.__dataclass_fields__)
    return [NodeDrain(**{k: v for k, v in row.items() if k in fields}) for row in said["nodes"]]


def summary(nodes: list[NodeDrain]) -> tuple[bool, str]:
    """(every worker node drains, one line per node and what Ray cannot show)."""
    if not nodes:
        return False, "no alive node"
    parts, good = [], True
    for n in nodes:
        ok, why = n.verdict()
        if not n.head:
            good = good and ok is True
        role = "head" if n.head else "worker"
        parts.append(f"{role} {n.node[:8]} ({n.ip}): {why}")
    workers = [n for n in nodes if not n.head]
    if not workers:
        parts.append("no worker node up now (an autoscaler adds them): their pods' settings decide")
    parts.append("not visible from Ray: how long each machine or pod lives after SIGTERM (a pod's "
                 "terminationGracePeriodSeconds, the cloud's spot notice); it must outlast the drain window")
    return good and bool(workers), "; ".join(parts)
