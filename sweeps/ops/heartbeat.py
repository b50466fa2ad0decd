"""The driver's lease on its sweep: renewed on a helper thread while the sweep runs, on every host's view.

The lease lives in the sweep's index record (``driver_host``, ``driver_pid``, ``driver_token``, ``driver_proc``,
``lease_expires``) and on its MLflow parent run (tag ``sweeps.lease_expires``), so ``resume``, ``extend`` and
``sync`` on any host refuse a sweep whose driver is alive, and stale runs are closed from any host once the
lease has expired (:mod:`sweeps.lease`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sweeps import lease, store
from sweeps.execution.cluster import memory
from sweeps.tracking.client import RUN_TAG_LEASE

log = logging.getLogger(__name__)


def refuse_if_live(rec: store.SweepRecord, action: str = "resume") -> None:
    """BadInput when the sweep's driver may still be running, on this host or another (its lease)."""
    from sweeps.errors import BadInput

    if rec.owner_alive():
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} is still running (driver pid {rec.driver_pid} on "
                       f"{rec.driver_host or 'this host'}, lease renewed while it runs); {action} would race "
                       f"with it: wait for it to end, or stop it with Ctrl-C / SIGTERM first")


def driver_fields() -> dict[str, Any]:
    """The index record's fields that name this process as the sweep's driver, with a fresh lease."""
    me = lease.me()
    return {"driver_host": me.host, "driver_pid": me.pid, "driver_token": me.token, "driver_proc": me.proc,
            "lease_expires": lease.expiry()}


def claim(sweep_id: str, **changes: Any) -> store.SweepRecord:
    """Take the sweep for this process (and apply ``changes`` in the same write)."""
    return store.update(sweep_id, **driver_fields(), **changes)


class Heartbeat:
    """Renews this driver's lease every ``lease.LEASE_S / 4`` seconds until stopped (a context manager), and samples
    its memory for the sweep's peak (:func:`sweeps.execution.cluster.memory.sample`)."""

    def __init__(self, sweep_id: str, client: Any = None, parent_run_id: str = "",
                 also: Callable[[], None] | None = None) -> None:
        self.sweep_id, self.client, self.parent_run_id = sweep_id, client, parent_run_id
        self.also = also  # the run's own beat: the lease in its live status, writes that failed retried
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sweeps-lease-{sweep_id}", daemon=True)

    def beat(self) -> None:
        expires = lease.expiry()
        store.update(self.sweep_id, lease_expires=expires)
        if self.client is not None and self.parent_run_id:
            self.client.set_tag(self.parent_run_id, RUN_TAG_LEASE, f"{expires:.0f}")

    def _run(self) -> None:
        while not self._stop.wait(lease.LEASE_S / 4):
            memory.sample()  # where the OS keeps no per-sweep peak (not Linux), the sweep's own is sampled
            try:
                self.beat()
            except Exception as exc:  # a missed beat is retried; the lease outlives three of them
                log.warning("could not renew the driver's lease in the sweep's record (%s); retried in %.0f s",
                            exc, lease.LEASE_S / 4)
            if self.also is not None:
                try:
                    self.also()
                except Exception as exc:  # its own writes are guarded: this is a bug, said, never fatal
                    log.warning("the run's heartbeat failed (%s: %s)", type(exc).__name__, exc)

    def __enter__(self) -> Heartbeat:
        try:
            self.beat()
        except Exception as exc:
            log.warning("could not record the driver's lease (%s)", exc)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
