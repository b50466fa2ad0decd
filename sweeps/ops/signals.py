"""SIGTERM behaves like Ctrl-C during a sweep; once stopping, further signals never cut the record short.

What Kubernetes, systemd and cron's kill send is SIGTERM with a grace period (~30 s): the first SIGINT or
SIGTERM stops Tune gracefully (it saves its state, so ``resume`` continues); a second one while Tune is still
stopping skips Tune's last checkpoint; signals that arrive while the driver writes the index record and
closes the MLflow runs are noted and ignored, so the record is never left half-done.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
STOP_DRAIN_S = 10.0  # after a signal, MLflow gets this long to take the buffered writes


class Signals(logging.Handler):
    """Notices Tune's own Ctrl-C handling (a log line), turns SIGTERM into the same, and calls ``on_stop``."""

    def __init__(self, on_stop: Callable[[], None] | None = None) -> None:
        super().__init__(level=logging.WARNING)
        self.interrupted = False
        self.on_stop = on_stop

    def _stopping(self) -> None:
        if not self.interrupted and self.on_stop is not None:
            self.on_stop()
        self.interrupted = True

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Stop signal received"):
            self._stopping()

    def _term(self, *_: object) -> None:
        self._stopping()
        os.kill(os.getpid(), signal.SIGINT)  # Tune's handler: a graceful stop, then a hard one

    def __enter__(self) -> Signals:
        self.prev = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._term)
        logging.getLogger("ray.tune.tune").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self.prev)
        logging.getLogger("ray.tune.tune").removeHandler(self)


@contextmanager
def shielded(what: str) -> Iterator[None]:
    """While the body runs, SIGINT and SIGTERM are logged and ignored (the body is short and bounded).

    Only the main thread can set signal handlers; elsewhere (a driver embedded in a thread) the body just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, _frame: object) -> None:
        log.warning("%s received while %s; finishing that first (a few seconds)", signal.Signals(signum).name, what)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, note)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
