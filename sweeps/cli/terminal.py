"""The terminal is the sweep's: while a sweep runs, what Ray, Tune, MLflow and the trials print goes to a log file.

Ray's token-auth warning, MLflow's "Creating initial MLflow database tables", Tune's configuration box and its
TensorBoard hint, the raylet's worker-start notes and every trial's own output reach the driver's standard
output and error (Python's streams and the file descriptors Ray's C++ code and child processes write to). While
a sweep runs, both descriptors point at ``$SWEEPS_HOME/logs/console-<time>-<pid>.log`` (named in the first
line), and only ``sweeps``' own lines (the status line, warnings, the summary) reach the terminal. Every
``sweeps`` record, debug included, goes to the file too. ``-v`` leaves the terminal as it was.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sweeps import paths
from sweeps.errors import BadInput

QUIET = ("sweeps.execution.warmstart", "sweeps.execution.levers")  # how the sweep runs, not how it goes


def console_log() -> tuple[Path, list[Path], dict[Path, tuple[float, float]]]:
    """The console log's path, the folders made for it (outermost first) and the times of those that were
    there (so a refused command can leave them as they were)."""
    folder = paths.home() / "logs"
    made = [p for p in (folder.parent, folder) if not p.exists()]
    times = {p: (p.stat().st_atime, p.stat().st_mtime) for p in (folder.parent, folder) if p.exists()}
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"console-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log", made, times


@contextmanager
def sweep_terminal(verbose: bool | None = None) -> Iterator[Path | None]:
    """Send the libraries' output to the sweep's console log while the block runs (not with ``verbose``, which
    defaults to whether ``-v`` made the ``sweeps`` logger log debug). Input refused inside the block (BadInput)
    leaves no log behind."""
    sweeps_log = logging.getLogger("sweeps")
    if verbose is None:
        verbose = sweeps_log.level == logging.DEBUG
    if verbose or os.environ.get("SWEEPS_CONSOLE") == "terminal":
        yield None
        return
    path, made, times = console_log()
    restore = _to_file(sweeps_log, path)
    rejected = False
    try:
        yield path
    except BadInput:
        rejected = True
        raise
    finally:
        restore()
        if rejected:  # input refused before anything ran: leave nothing behind (the error says it all)
            _forget(path, made, times)


def _to_file(sweeps_log: logging.Logger, path: Path) -> Callable[[], None]:
    """Point descriptors 1 and 2 and the libraries' records at ``path``; ``sweeps``' own lines stay on the
    terminal. Returns what puts everything back."""
    handlers = [h for h in sweeps_log.handlers if isinstance(h, logging.StreamHandler)
                and not isinstance(h, logging.FileHandler)]
    for h in handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    terminal = os.fdopen(os.dup(saved[2]), "w", buffering=1)
    quiet = [logging.getLogger(n) for n in QUIET]
    levels = [q.level for q in quiet]
    streams = [h.setStream(terminal) for h in handlers]
    handler_levels, logger_level = [h.level for h in handlers], sweeps_log.level
    for h in handlers:
        h.setLevel(max(h.level, logging.INFO))
    sweeps_log.setLevel(logging.DEBUG)  # the file gets the debug lines; the terminal stays at INFO
    print(f"[sweeps] Ray's, Tune's, MLflow's and the trials' own output: {path} (-v shows it here)", file=terminal)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    file_handler = logging.FileHandler(path)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    file_handler.setLevel(logging.DEBUG)
    sweeps_log.addHandler(file_handler)
    for q in quiet:  # their INFO lines go to the file only
        q.setLevel(logging.INFO)
        for h in handlers:
            h.addFilter(_below_warning(q.name))
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(log_fd)
        sweeps_log.removeHandler(file_handler)
        file_handler.close()
        for h, stream, level in zip(handlers, streams, handler_levels, strict=True):
            h.filters = [f for f in h.filters if not isinstance(f, _below_warning)]
            h.setStream(stream)
            h.setLevel(level)
        sweeps_log.setLevel(logger_level)
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
        terminal.close()

    return restore


def _forget(path: Path, made: list[Path], times: dict[Path, tuple[float, float]]) -> None:
    path.unlink(missing_ok=True)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:  # something else wrote there meanwhile: keep it
            return
    for folder, (atime, mtime) in times.items():
        os.utime(folder, (atime, mtime))


class _below_warning(logging.Filter):  # noqa: N801 - a filter named for what it drops
    """Drops a logger's records below WARNING (they still reach the console log's file handler)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.prefix = name

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(self.prefix)
