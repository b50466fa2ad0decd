"""SIGTERM behaves like Ctrl-C during a sweep; once stopping, further signals never cut the record short.

What Kubernetes, systemd and cron's kill send is SIGTERM with a grace period (~30 s): the first SIGINT or
SIGTERM stops Tune gracefully (it saves its state, so ``resume`` continues); a second one while Tune is still
stopping skips Tune's last checkpoint; signals that arrive while the driver writes the index record and
closes the MLflow runs are noted and ignored, so the record is never left half-done.

Called from Python (:mod:`sweeps.api`), the process belongs to a host (a Jupyter kernel, a script, a CI job):
inside :func:`hosted`, a SIGTERM handler the host set stays in place, Tune's Ctrl-C handling is used only where
SIGINT has Python's default handler (what a kernel sets while a cell runs), and every handler the sweep's
libraries changed (Tune leaves its SIGINT and SIGUSR1 handlers behind) is put back on the way out.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
STOP_DRAIN_S = 10.0  # after a signal, MLflow gets this long to take the buffered writes
TUNE_SIGINT_OFF = "TUNE_DISABLE_SIGINT_HANDLER"  # read by Tune each time a Tuner fits
_HOSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("sweeps_hosted", default=False)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _take_sigterm() -> bool:
    """Whether a sweep may turn SIGTERM into its graceful stop: only the main thread can set handlers, and a host
    keeps a SIGTERM handler of its own."""
    if not _main_thread():
        return False
    return not _HOSTED.get() or signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class Signals(logging.Handler):
    """Notices Tune's own Ctrl-C handling (a log line), turns SIGTERM into the same, and calls ``on_stop``."""

    def __init__(self, on_stop: Callable[[], None] | None = None,
                 interrupt: Callable[[], bool] | None = None) -> None:
        super().__init__(level=logging.WARNING)
        self.interrupted = False
        self.on_stop = on_stop
        self.interrupt = interrupt  # ends Tune's loop as Ctrl-C does, without a signal; False where it cannot
        self.termed = False

    def _stopping(self) -> None:
        if not self.interrupted and self.on_stop is not None:
            self.on_stop()
        self.interrupted = True

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Stop signal received"):
            self._stopping()

    def _term(self, *_: object) -> None:
        again, self.termed = self.termed, True
        self._stopping()
        if again and self.interrupt is not None:
            raise KeyboardInterrupt  # a second SIGTERM while Tune stops: its last checkpoint is skipped
        if self.interrupt is None or not self.interrupt():
            os.kill(os.getpid(), signal.SIGINT)  # Tune's handler: a graceful stop, then a hard one

    def __enter__(self) -> Signals:
        self.took = _take_sigterm()
        if self.took:
            self.prev = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._term)
        logging.getLogger("ray.tune.tune").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.took:
            signal.signal(signal.SIGTERM, self.prev)
        logging.getLogger("ray.tune.tune").removeHandler(self)


@contextmanager
def hosted() -> Iterator[None]:
    """A sweep run from Python inside a host's process: the host's signal handlers are left alone, and put back
    if a library changed them. A KeyboardInterrupt still stops the sweep cleanly (Tune's graceful stop where
    SIGINT has Python's default handler; else the run pipeline's ``except KeyboardInterrupt``)."""
    token = _HOSTED.set(True)
    main = _main_thread()
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None)) if s}
    # A host with its own SIGINT handler (or none: ignored) keeps it: Tune would replace it for the fit.
    tune_off = main and kept[signal.SIGINT] is not signal.default_int_handler and TUNE_SIGINT_OFF not in os.environ
    if tune_off:
        os.environ[TUNE_SIGINT_OFF] = "1"
    try:
        yield
    finally:
        _HOSTED.reset(token)
        if tune_off:
            os.environ.pop(TUNE_SIGINT_OFF, None)
        for s, handler in kept.items():
            if main and handler is not None and signal.getsignal(s) is not handler:
                signal.signal(s, handler)


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
