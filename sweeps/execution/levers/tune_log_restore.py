"""Lever ``tune_log_restore``: Tune's result loggers without their history-truncating copy-back.

When a trial restarts from a checkpoint (a PBT exploit, a scheduler pause, a retry), Tune's stock
``result.json``/``progress.csv`` loggers copy the trial's log file back from the storage path over the driver's
staging copy (their private ``_restore_from_remote``). Within one driver session the staging copy is the
newest; the storage copy lags by up to one experiment snapshot (10 s or more), so the copy-back drops the
trial's latest rows (seen: a PBT trial's ``result.json`` emptied, PB2's parameter schedule lost). These
subclasses copy back only when this driver has no staging copy yet: a sweep resumed in a new Ray session.
Fallback: Tune's stock loggers (a restarted trial may lose its last rows of history within a session).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from sweeps.execution.levers.core import Lever, binds, has


def check(loggers: Iterable[Any], trial_cls: Any) -> str | None:
    """Tune's loggers call ``self._restore_from_remote(file_name, trial)`` (the hook this lever overrides and
    calls back), and a trial has the ``local_path`` the override reads."""
    for logger in loggers:
        hook = getattr(logger, "_restore_from_remote", None)
        if hook is None:
            return f"{logger.__name__} has no _restore_from_remote"
        if problem := binds(hook, None, "result.json", None):
            return problem
        if "self._restore_from_remote(" not in inspect.getsource(logger):
            return f"{logger.__name__} no longer calls _restore_from_remote"
    return has(trial_cls, "local_path")


def _probe() -> str | None:
    from ray.tune.experiment import Trial

    return check([JsonLoggerCallback, CSVLoggerCallback], Trial)


LEVER = Lever(name="tune_log_restore", package="ray", checked=("2.60.",),
              what="a restarted trial keeps this driver's result.json rows (no copy-back from storage)",
              fallback="Tune's stock loggers (a restarted trial may lose its latest rows within a session)",
              probe=_probe)


class _KeepStaged:
    """Copy a trial's log file back from storage only when this driver has no staging copy of it."""

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        if not (trial.local_path and Path(trial.local_path, file_name).is_file()):
            super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLogger(_KeepStaged, JsonLoggerCallback):
    """``result.json`` per trial; keeps this driver's rows across trial restarts."""


class CsvLogger(_KeepStaged, CSVLoggerCallback):
    """``progress.csv`` per trial; keeps this driver's rows across trial restarts."""
