"""Lever ``rendezvous``: a torch rendezvous whose store listens on 127.0.0.1, for the embedded Ray's trials.

``torch.distributed.TCPStore`` (Ray Train's ``env://`` rendezvous) listens on every interface, with no
authentication. This lever gives Train a subclass of its private ``_TorchBackend`` whose rank 0 binds the
store's socket to 127.0.0.1 itself (``TCPStore(master_listen_fd=...)``), used only when the trial's node IP is
loopback (then every worker is on this machine). Fallback: Train's own rendezvous (all interfaces).
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any

from sweeps.execution.levers.core import Lever, binds, documents, fields, first, has, importable

_STORE: Any = None  # rank 0's store, kept alive in the worker process
WORKER_GROUPS = (("ray.train._internal.worker_group", "WorkerGroup"),  # Train v1
                 ("ray.train.v2._internal.execution.worker_group", "WorkerGroup"))  # Train v2


def check_worker_group(group: Any) -> str | None:
    """A Train worker group takes the calls :func:`torch_config`'s backend makes on it."""
    def fn() -> None:
        return None

    return first(has(group, "execute", "execute_single", "execute_single_async", "__len__"),
                 binds(getattr(group, "execute_single", None), None, 0, fn, world_size=1, timeout_s=1.0),
                 binds(getattr(group, "execute_single_async", None), None, 0, fn, backend="gloo", world_rank=0,
                       world_size=1, port=1, timeout_s=1.0),
                 binds(getattr(group, "execute", None), None, fn))


def check_torch(config_module: Any, tcp_store: Any) -> str | None:
    """Train's torch config and backend, and torch's ``TCPStore``, take what this lever calls and reads."""
    backend = getattr(config_module, "_TorchBackend", None)
    return first(has(config_module, "TorchConfig", "_TorchBackend", "_set_torch_distributed_env_vars"),
                 fields(getattr(config_module, "TorchConfig", None), "backend", "timeout_s"),
                 has(getattr(config_module, "TorchConfig", None), "backend_cls"),
                 binds(getattr(backend, "on_start", None), None, worker_group=None, backend_config=None),
                 binds(getattr(config_module, "_set_torch_distributed_env_vars", None)),
                 documents(getattr(tcp_store, "__init__", None), "host_name", "port", "world_size", "is_master",
                           "timeout", "wait_for_workers", "master_listen_fd"))


def _probe() -> str | None:
    if problem := importable(("ray.train.torch.config", "torch.distributed", *(m for m, _ in WORKER_GROUPS))):
        return problem
    import importlib

    import ray.train.torch.config as tc
    import torch.distributed as dist

    return first(check_torch(tc, getattr(dist, "TCPStore", None)),
                 *(check_worker_group(getattr(importlib.import_module(m), name, None)) for m, name in WORKER_GROUPS))


LEVER = Lever(name="rendezvous", package="ray", checked=("2.60.",),
              what="the Train workers' torch rendezvous listens on 127.0.0.1 (embedded Ray)",
              fallback="Train's own rendezvous, on every interface", probe=_probe)


def _start_store(world_size: int, timeout_s: float) -> int:
    """On rank 0: a TCPStore server on a socket bound to 127.0.0.1 (kept alive in the worker)."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = int(sock.getsockname()[1])
    global _STORE
    _STORE = dist.TCPStore(
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
    store = (_STORE if world_rank == 0 else dist.TCPStore("127.0.0.1", port, world_size, False, timeout=timeout))
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world_size, timeout=timeout)


def torch_config() -> Any:
    """A ``TorchConfig`` whose rank 0 hosts the store on a pre-bound loopback socket (the caller checked that
    this node is loopback-only)."""
    import ray
    from ray.train._internal.worker_group import WorkerGroup as V1WorkerGroup
    from ray.train.torch.config import TorchConfig, _set_torch_distributed_env_vars, _TorchBackend

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
