"""The tracker's MLflow writes, off Tune's loop: one writer thread, in the order Tune's hooks came.

Every hook of the sweep's tracker (a trial's start, each result, each checkpoint, its end; an operator's tags;
a scheduler's pauses and promotions) is queued here as it comes and carried out by one thread, so no MLflow call
holds Tune's loop: a slow store, or a server that does not answer for a while, delays the runs' writes, never the
trials. One thread keeps them in order and keeps SQLite to one writer. The hooks hand over a snapshot of the
trial as it was (:class:`TrialView`), since Tune goes on changing its own object.

At most :data:`LIMIT` writes wait: past that, Tune's loop waits for a place (the memory held stays bounded). The
end of the sweep, and a stop, wait for the queue (:meth:`Writer.wait`) before they drain the tracker and close its
runs, so what a SIGTERM or Ctrl-C leaves is what it left before. A SIGKILL of the driver loses what was queued,
as it loses the metrics buffered between flushes: the next sweep command closes the dead driver's runs as KILLED
and ``python -m sweeps sync`` back-fills them from the Ray results.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
LIMIT = 10_000
THREAD = "sweeps-mlflow-writer"  # its MLflow seconds are not Tune's loop's (sweeps.tracking.client.CallTimer)


@dataclass(frozen=True)
class TrialView:
    """What the tracker reads of a Tune trial, as it was when the hook came."""

    trial_id: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    last_result: dict[str, Any] = field(default_factory=dict)
    num_failures: int = 0
    path: str | None = None
    error_file: str | None = None

    def __str__(self) -> str:
        return self.name


def view(trial: Any) -> TrialView:
    return TrialView(trial_id=str(trial.trial_id), name=str(trial), config=dict(trial.config or {}),
                     last_result=dict(trial.last_result or {}), num_failures=int(trial.num_failures or 0),
                     path=getattr(trial, "path", None), error_file=getattr(trial, "error_file", None))


class Writer:
    """One thread that runs the queued writes in order; :meth:`wait` until none is left."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.queue: queue.Queue[Callable[[], None]] = queue.Queue(maxsize=limit)
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.pending = 0  # queued or being carried out
        self.thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            self.pending += 1
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._work, name=THREAD, daemon=True)
                self.thread.start()
        self.queue.put(job)

    def _work(self) -> None:
        while True:
            job = self.queue.get()
            try:
                job()
            except Exception as exc:  # a hook's own failure: said, and the writes after it go on
                log.warning("MLflow: a queued write failed (%s: %s)", type(exc).__name__, exc)
            finally:
                with self.lock:
                    self.pending -= 1
                    if not self.pending:
                        self.idle.notify_all()

    def abandon(self) -> int:
        """Drop the writes still queued (a store that did not answer in time; the caller closes the runs with what
        was written): how many. The one being carried out, if any, finishes on its own."""
        dropped = 0
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
            dropped += 1
            with self.lock:
                self.pending -= 1
        return dropped

    def wait(self, timeout_s: float) -> bool:
        """Until every queued write is carried out, at most ``timeout_s``: True when none is left. Called from
        the writer thread itself it returns at once (nothing can be waited for there)."""
        if threading.current_thread() is self.thread:
            return True
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while self.pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.idle.wait(left)
        return True
