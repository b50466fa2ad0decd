"""The status line of a sweep run from Python: one line updated in place, not one more line every 10 seconds.

In a Jupyter kernel it is an IPython display updated in place (the cell keeps one output); on a terminal it is
rewritten with ``\\r``; elsewhere (a CI job, a log file) it stays plain logging: the host's logging setup
decides, and when the host set none, the lines go to stderr as the CLI writes them.
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PROGRESS_LOGGER = "sweeps.progress"  # sweeps.execution.run.progress logs the status line here
PREFIX = "[sweeps] "


class NotebookLine(logging.Handler):
    """Shows each status line in one IPython display output, replacing the one before."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.shown: Any = None  # the display handle, after the first line

    def emit(self, record: logging.LogRecord) -> None:
        from IPython.display import display

        data = {"text/plain": PREFIX + record.getMessage()}
        if self.shown is None:
            self.shown = display(data, raw=True, display_id=True)
        else:
            self.shown.update(data, raw=True)


class TerminalLine(logging.Handler):
    """Rewrites one terminal line (cut to the terminal's width: a wrapped line cannot be rewritten)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        self.stream, self.shown = stream, False

    def emit(self, record: logging.LogRecord) -> None:
        width = shutil.get_terminal_size().columns - 1
        self.stream.write("\r" + (PREFIX + record.getMessage())[:width] + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:  # the last state stays on screen; what is printed next starts on a line of its own
            self.stream.write("\n")
            self.stream.flush()
        super().close()


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython is looked at only when the host imported it already)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def line_handler(stream: TextIO | None = None) -> logging.Handler | None:
    """The handler that shows the status line here; None where plain logging is left to the host's setup."""
    stream = stream or sys.stderr
    if in_notebook():
        return NotebookLine()
    if stream.isatty():
        return TerminalLine(stream)
    if logging.getLogger(PROGRESS_LOGGER).hasHandlers():
        return None  # the host configured logging: it decides whether INFO lines show, and where
    plain = logging.StreamHandler(stream)
    plain.setFormatter(logging.Formatter(PREFIX + "%(message)s"))
    return plain


@contextmanager
def status_line(enabled: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """While the body runs, the sweep's status line shows as :func:`line_handler` says (only there: it does not
    also reach the host's handlers, which would print every one of them)."""
    handler = line_handler(stream) if enabled else None
    if handler is None:
        yield
        return
    logger = logging.getLogger(PROGRESS_LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        handler.close()
