"""Loopback-only listeners for the embedded local Ray, and a torch rendezvous that listens on 127.0.0.1.

Every Ray component binds by its node IP: loopback when that IP is loopback, all interfaces otherwise, and
``ray.init(_node_ip_address="127.0.0.1")`` is turned back into the routable address. Ray's own switch,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (read by ``ray_constants`` at import, so the constant is set too),
makes the node IP 127.0.0.1 for the GCS, raylet, agents and every worker (docs/security.md). It is set for
``cluster=local`` only, and undone when that Ray stops: a ``ray start`` worker node refuses to start under it.

``torch.distributed.TCPStore`` (Ray Train's ``env://`` rendezvous) always listens on every interface, with no
authentication. :func:`torch_config` gives Train a backend whose rank 0 binds the store's socket to 127.0.0.1
itself (``TCPStore(master_listen_fd=...)``) whenever the trial's node IP is loopback: then every worker is
on this machine. ``GLOO_SOCKET_IFNAME=lo`` keeps gloo's own sockets on loopback too, and
``NCCL_SOCKET_IFNAME==lo`` (exactly ``lo``) with ``NCCL_SOCKET_FAMILY=AF_INET`` NCCL's bootstrap and network
sockets (GPU trials). A user's own value of any of them is kept, and then the promise rests on it:
:func:`listeners` says so, for the parent run's tag and the report.

The node address switch and the rendezvous backend are levers (:mod:`sweeps.execution.levers.loopback_node`,
:mod:`sweeps.execution.levers.rendezvous`): where they are off, Ray's public path runs (its listeners on the
node's address, Train's own rendezvous), a warning says so and :func:`listeners` tells the record and the
report.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # the loopback_node lever's switch
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_IFNAME = "NCCL_SOCKET_IFNAME"
NCCL_FAMILY = "NCCL_SOCKET_FAMILY"
IN_PROCESS = "each trial trains in its own process: no torch rendezvous, gloo or NCCL"
log = logging.getLogger(__name__)


def internals_missing(rendezvous: bool = True) -> str | None:
    """Why the loopback levers are off in this process (:mod:`sweeps.execution.levers`), or None.

    ``rendezvous=False``: a sweep whose trials each train in their own process (no worker group, so no torch
    rendezvous, gloo or NCCL) asks only about Ray's node address; the rendezvous lever's probe imports torch
    and Train's torch backend (~1.4 CPU-s), which such a sweep's driver otherwise never imports."""
    from sweeps.execution.levers import core, loopback_node
    from sweeps.execution.levers import rendezvous as rdv

    levers = (loopback_node.LEVER, rdv.LEVER) if rendezvous else (loopback_node.LEVER,)
    off = [f"{lv.name}: {core.reason(lv)}" for lv in levers if not core.applies(lv)]
    return "; ".join(off) or None


def loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), if there is one."""
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def pins(lo: str) -> dict[str, str]:
    """What keeps gloo's and NCCL's own sockets on the loopback interface ``lo`` (NCCL: ``=`` is an exact
    name, not a prefix; IPv4, so 127.0.0.1)."""
    return {GLOO_IFNAME: lo, NCCL_IFNAME: f"={lo}", NCCL_FAMILY: "AF_INET"}


def worker_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Env vars for the local Ray's workers (Train workers included): gloo and NCCL on the loopback interface,
    each unless the user set it."""
    env = os.environ if environ is None else environ
    lo = loopback_interface()
    return {k: v for k, v in pins(lo).items() if not env.get(k)} if lo else {}


def user_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's own values of those variables, where they differ from the pins: gloo and NCCL bind where
    these say (a value equal to the pin, such as one an earlier sweep of this process set, promises the same)."""
    env = os.environ if environ is None else environ
    lo = loopback_interface() or "lo"
    return {k: env[k] for k, pin in pins(lo).items() if env.get(k) and env[k] != pin}


def listeners(mode: str, environ: Mapping[str, str] | None = None, rendezvous: bool = True) -> str:
    """Where the sweep's processes listen, in one line: the parent run's ``sweeps.listeners`` tag and a line of
    the report. On the embedded Ray: loopback only, or on what the user's own settings say. ``rendezvous=False``:
    every trial trains in its own process, so only Ray listens (:func:`internals_missing`)."""
    if mode != "local":
        return "the cluster's addresses (cluster=remote: no loopback promise)"
    if reason := internals_missing(rendezvous):
        return f"the node's address, not loopback: Ray's public path ({reason})"
    if not rendezvous:
        return f"loopback only (Ray on 127.0.0.1; {IN_PROCESS})"
    if loopback_interface() is None:
        return "loopback for Ray and the rendezvous; gloo and NCCL not pinned (no loopback interface found)"
    own = user_settings(environ)
    if not own:
        return "loopback only (Ray, the torch rendezvous, gloo and NCCL on 127.0.0.1)"
    mine = ", ".join(f"{k}={v}" for k, v in own.items())
    return (f"loopback only for Ray and the torch rendezvous; gloo and NCCL follow the user's own {mine}: the "
            f"loopback promise depends on it")


def enter_local() -> None:
    """Before the embedded ``ray.init``: node IP 127.0.0.1 for this process and every process it starts (the
    ``loopback_node`` lever; where it is off, a warning and Ray's own address)."""
    from sweeps.execution.levers import core, loopback_node

    if not core.applies(loopback_node.LEVER):
        log.warning("the embedded Ray listens on this node's address, not only on loopback: %s",
                    core.reason(loopback_node.LEVER))
        return
    loopback_node.enter()


def leave_local() -> None:
    """After the embedded Ray stopped: the environment as it was (a later remote connection is unaffected)."""
    from sweeps.execution.levers import loopback_node

    loopback_node.leave()


def is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "localhost") or ip.startswith("::ffff:127.")




def torch_config() -> Any:
    """A ``TorchConfig`` whose rendezvous listens on 127.0.0.1 when this node is loopback-only (the
    ``rendezvous`` lever), else None: Train's own rendezvous.

    Called in the trial's driver (on the node where its workers run when the node IP is loopback).
    """
    import ray

    from sweeps.execution.levers import core, loopback_node, rendezvous

    if not (core.applies(rendezvous.LEVER) and core.applies(loopback_node.LEVER)):
        return None
    if not is_loopback(ray.util.get_node_ip_address()):
        return None
    return rendezvous.torch_config()
