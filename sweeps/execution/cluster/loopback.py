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

The node address switch and the rendezvous backend use Ray internals (``ray._private.ray_constants``, Train's
``_TorchBackend``): on a Ray version they were not checked against (:mod:`sweeps.execution.levers.rayversion`) neither
is used, Ray's public path runs (its listeners on the node's address, Train's own rendezvous), a warning says
so and :func:`listeners` tells the record and the report.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_IFNAME = "NCCL_SOCKET_IFNAME"
NCCL_FAMILY = "NCCL_SOCKET_FAMILY"
_saved: list[tuple[str | None, Any]] = []
log = logging.getLogger(__name__)


def internals_missing() -> str | None:
    """Why the loopback levers cannot use Ray's internals here (an unchecked Ray version, a moved name), or None."""
    from sweeps.execution.levers import rayversion

    if reason := rayversion.unchecked():
        return reason
    try:
        import ray._private.ray_constants as rc
        from ray.train._internal.worker_group import WorkerGroup  # noqa: F401
        from ray.train.torch.config import TorchConfig, _set_torch_distributed_env_vars, _TorchBackend  # noqa: F401
    except ImportError as exc:
        return f"a Ray internal moved: {exc}"
    if not hasattr(rc, "ENABLE_RAY_CLUSTER") or not hasattr(_TorchBackend, "on_start"):
        return "Ray's node-address switch or Train's torch backend moved"
    return None


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


def listeners(mode: str, environ: Mapping[str, str] | None = None) -> str:
    """Where the sweep's processes listen, in one line: the parent run's ``sweeps.listeners`` tag and a line of
    the report. On the embedded Ray: loopback only, or on what the user's own settings say."""
    if mode != "local":
        return "the cluster's addresses (cluster=remote: no loopback promise)"
    if reason := internals_missing():
        return f"the node's address, not loopback: Ray's public path ({reason})"
    if loopback_interface() is None:
        return "loopback for Ray and the rendezvous; gloo and NCCL not pinned (no loopback interface found)"
    own = user_settings(environ)
    if not own:
        return "loopback only (Ray, the torch rendezvous, gloo and NCCL on 127.0.0.1)"
    mine = ", ".join(f"{k}={v}" for k, v in own.items())
    return (f"loopback only for Ray and the torch rendezvous; gloo and NCCL follow the user's own {mine}: the "
            f"loopback promise depends on it")


def enter_local() -> None:
    """Before the embedded ``ray.init``: node IP 127.0.0.1 for this process and every process it starts (on a
    checked Ray; on another one, a warning and Ray's own address)."""
    if reason := internals_missing():
        log.warning("the embedded Ray listens on this node's address, not only on loopback: %s", reason)
        return
    import ray._private.ray_constants as rc

    _saved.append((os.environ.get(SWITCH), rc.ENABLE_RAY_CLUSTER))
    os.environ[SWITCH] = "0"
    rc.ENABLE_RAY_CLUSTER = False  # services.get_node_ip_address reads it per call


def leave_local() -> None:
    """After the embedded Ray stopped: the environment as it was (a later remote connection is unaffected)."""
    if not _saved:
        return
    import ray._private.ray_constants as rc

    env, const = _saved.pop()
    if env is None:
        os.environ.pop(SWITCH, None)
    else:
        os.environ[SWITCH] = env
    rc.ENABLE_RAY_CLUSTER = const


def is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "localhost") or ip.startswith("::ffff:127.")


def _start_store(world_size: int, timeout_s: float) -> int:
    """On rank 0: a TCPStore server on a socket bound to 127.0.0.1 (kept alive in the worker)."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = int(sock.getsockname()[1])
    dist._sweeps_loopback_store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", port, world_size, True, timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False, master_listen_fd=sock.detach())
    return port


def _init_group(backend: str, world_rank: int, world_size: int, port: int, timeout_s: float) -> None:
    import torch.distributed as dist

    if backend == "nccl":
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # as Ray's own setup does
    # as Ray's init_method="env" does: a loop (or a library) that reads where rank 0's store is finds it
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    timeout = datetime.timedelta(seconds=timeout_s)
    store = (dist._sweeps_loopback_store if world_rank == 0  # type: ignore[attr-defined]
             else dist.TCPStore("127.0.0.1", port, world_size, False, timeout=timeout))
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


def torch_config() -> Any:
    """A ``TorchConfig`` whose rendezvous listens on 127.0.0.1 when this node is loopback-only, else None
    (Train's own rendezvous; also on a Ray whose internals were not checked).

    Called in the trial's driver (on the node where its workers run when the node IP is loopback).
    """
    if internals_missing():
        return None
    import ray
    from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
    from ray.train.torch.config import TorchConfig, _set_torch_distributed_env_vars, _TorchBackend

    if not is_loopback(ray.util.get_node_ip_address()):
        return None

    class LoopbackTorchBackend(_TorchBackend):  # type: ignore[misc]
        """Ray's torch backend with rank 0 hosting the store on a pre-bound loopback socket."""

        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            backend = backend_config.backend or "gloo"
            if backend not in ("gloo", "nccl"):
                super().on_start(worker_group, backend_config)
                return
            n = len(worker_group)
            port = worker_group.execute_single(0, _start_store, world_size=n, timeout_s=backend_config.timeout_s)
            if not isinstance(worker_group, V1WorkerGroup):
                worker_group.execute(_set_torch_distributed_env_vars)
            ray.get([worker_group.execute_single_async(i, _init_group, backend=backend, world_rank=i, world_size=n,
                                                       port=port, timeout_s=backend_config.timeout_s)
                     for i in range(n)])

    class LoopbackTorchConfig(TorchConfig):  # type: ignore[misc]
        @property
        def backend_cls(self) -> Any:
            return LoopbackTorchBackend

    return LoopbackTorchConfig()
