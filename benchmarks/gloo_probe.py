"""How long a bare two-process gloo process group takes to form on 127.0.0.1 (issue 22: is the rendezvous the
cost of a trial's "process group" stage?). Prints getaddrinfo(hostname), then the init and first all-reduce
times without and with GLOO_SOCKET_IFNAME=lo.

    python benchmarks/gloo_probe.py
"""

from __future__ import annotations

import datetime
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, world: int, port: int, ifname: str | None) -> None:
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    t0 = time.time()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    t1 = time.time()
    dist.all_reduce(torch.ones(1))
    t2 = time.time()
    if rank == 0:
        print(f"ifname={ifname!r} init {t1 - t0:.2f}s first allreduce {t2 - t1:.3f}s", flush=True)  # noqa: T201
    dist.destroy_process_group()


def main() -> None:
    t = time.time()
    socket.getaddrinfo(socket.gethostname(), None)
    print("getaddrinfo(hostname)", round(time.time() - t, 3), socket.gethostname())  # noqa: T201
    for ifname in (None, "lo"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(run, args=(2, port, ifname), nprocs=2)


if __name__ == "__main__":
    main()
