"""A trial's model, uploaded off Tune's loop: one worker thread, a bounded queue, drained before the sweep ends.

Keeping a trial's best checkpoint as its LoggedModel copies the checkpoint into the artifact store: seconds for
a small model, minutes for a large one or a slow store. Done in Tune's ``on_trial_complete`` it would hold the
loop (no trial starts, no report is read, the live status goes stale); here the ending of the trial's run (its
model, tags and final status) is queued and written by a worker thread while the sweep goes on. At most
:data:`LIMIT` endings wait: past that, the trial that ends waits for a place (the memory held stays bounded).
A store that does not answer is retried every few seconds; :meth:`Uploads.wait` is how the end of the sweep
(or a stop) drains the queue, and :meth:`Uploads.cut_short` ends, with a tag saying why, the runs whose upload
did not finish in time: no run is ever left RUNNING, and ``python -m sweeps sync`` keeps their models later.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)
LIMIT = 8
THREAD = "sweeps-model-uploads"  # the uploads' thread's name (its MLflow seconds are not Tune's loop's)
RETRY_S = 2.0


@dataclass
class Ending:
    """One run's ending: ``write`` (the upload and the final writes; raises when the store does not answer) and
    ``cut_short`` (the final writes alone, with why the model is missing)."""

    run_id: str
    write: Callable[[], None]
    cut_short: Callable[[], None]


class Uploads:
    def __init__(self, limit: int = LIMIT) -> None:
        self.queue: queue.Queue[Ending] = queue.Queue(maxsize=limit)
        self.waiting: dict[str, Ending] = {}  # run id -> its ending, queued or being written
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.thread: threading.Thread | None = None

    def submit(self, ending: Ending) -> None:
        """Queue a run's ending (waits for a place while :data:`LIMIT` endings wait)."""
        with self.lock:
            self.waiting[ending.run_id] = ending
            if self.thread is None or not self.thread.is_alive():
                self.cancelled.clear()
                self.thread = threading.Thread(target=self._work, name=THREAD, daemon=True)
                self.thread.start()
        self.queue.put(ending)

    def _work(self) -> None:
        while True:
            ending = self.queue.get()
            failures = 0
            while not self.cancelled.is_set():
                try:
                    ending.write()
                    break
                except Exception as exc:  # the store does not answer: retried until it does, or the sweep ends
                    failures += 1
                    if failures in (1, 10) or failures % 100 == 0:
                        log.warning("MLflow: could not end the run %s with its model yet (%s); will retry",
                                    ending.run_id, exc)
                    self.cancelled.wait(RETRY_S)
            with self.lock:
                if not self.cancelled.is_set():
                    self.waiting.pop(ending.run_id, None)
            self.queue.task_done()

    def pending(self) -> int:
        with self.lock:
            return len(self.waiting)

    def wait(self, timeout_s: float) -> bool:
        """Wait until every queued ending is written, at most ``timeout_s``: True when none is left."""
        deadline = time.monotonic() + timeout_s
        while self.pending():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    def cut_short(self) -> int:
        """End the runs whose endings are not written (their models missing, said on the run): how many."""
        self.cancelled.set()
        with self.lock:
            left, self.waiting = list(self.waiting.values()), {}
        for ending in left:
            try:
                ending.cut_short()
            except Exception as exc:  # `sweeps sync` closes it from the Ray results
                log.warning("MLflow: could not end the run %s (%s); `python -m sweeps sync` does", ending.run_id, exc)
        return len(left)
