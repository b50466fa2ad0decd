"""SIGTERM behaves like Ctrl-C during a sweep, and Tune's own Ctrl-C handling is noticed."""

from __future__ import annotations

import logging
import os
import signal


class Signals(logging.Handler):
    """SIGTERM behaves like Ctrl-C: Tune stops gracefully, saves its state, and we close every run.

    Tune handles Ctrl-C itself and returns normally, saying so only in a log line: that line (or our SIGTERM)
    sets ``interrupted``.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.interrupted = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Stop signal received"):
            self.interrupted = True

    def _term(self, *_: object) -> None:
        self.interrupted = True
        os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self) -> Signals:
        self.prev = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._term)
        logging.getLogger("ray.tune.tune").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self.prev)
        logging.getLogger("ray.tune.tune").removeHandler(self)
