"""A promoter's use of the registry lock, as a script: tests/test_lock_namespaces.py runs it in namespaces.

``python tests/lock_holder.py race URI ROUNDS INSIDE GO``: take the lock ROUNDS times; while holding it, own the
file INSIDE (created exclusively: a second holder at the same time finds it there and exits 3).
``python tests/lock_holder.py hold URI``: take the lock, say its expiry, hold it until killed.
``python tests/lock_holder.py wait URI GO``: once GO exists, take the lock; say when it tried and when it got it.
Every mode first prints ``ready HOSTNAME PID`` (the namespace's view) and, where given GO, waits for that file.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from sweeps.registry import lock


def _ready(go: str | None) -> None:
    print("ready", socket.gethostname(), os.getpid(), flush=True)
    while go and not Path(go).exists():
        time.sleep(0.05)


def race(c: MlflowClient, rounds: int, inside: Path) -> None:
    for i in range(rounds):
        held = lock.acquire(c, "m", "champion", wait_s=120)
        try:
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            print("overlap: another holder is inside", flush=True)
            sys.exit(3)
        os.close(fd)
        time.sleep(0.3)
        held.check()  # LockLost (exit 1) if the other one took or released our lock meanwhile
        inside.unlink()
        lock.release(held)
        print("round", i, flush=True)


def main(mode: str, uri: str, *rest: str) -> None:
    c = MlflowClient(tracking_uri=uri, registry_uri=uri)
    if mode == "race":
        _ready(rest[2])
        race(c, int(rest[0]), Path(rest[1]))
    elif mode == "hold":
        _ready(None)
        held = lock.acquire(c, "m", "champion", wait_s=60)
        print("held", c.get_registered_model(held.name).tags[lock.TAG_EXPIRES], flush=True)
        time.sleep(600)
    elif mode == "wait":
        _ready(rest[0])
        print("trying", f"{time.time():.3f}", flush=True)
        held = lock.acquire(c, "m", "champion", wait_s=120)
        print("acquired", f"{time.time():.3f}", flush=True)
        lock.release(held)


if __name__ == "__main__":
    main(*sys.argv[1:])
