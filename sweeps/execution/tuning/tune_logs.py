"""Tune's result loggers (``result.json``, ``progress.csv``), minus a history-truncating restore.

When a trial restarts from a checkpoint (a PBT exploit, a scheduler pause, a retry after a failure), Tune's
stock loggers copy the trial's log file back from the storage path over the driver's staging copy. Within
one driver session the staging copy is the newest one; the storage copy lags by up to one experiment
snapshot period (10 s or more), so the copy-back silently drops the trial's latest rows (seen: a PBT trial's
``result.json`` emptied, PB2's parameter schedule lost). These subclasses copy back only when this driver
has no staging copy yet, which is the case the copy is for: a sweep resumed in a new Ray session.

Imported only where Ray is already loaded (building a Tuner).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback


class _KeepStaged:
    """Copy a trial's log file back from storage only when this driver has no staging copy of it."""

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        if not (trial.local_path and Path(trial.local_path, file_name).is_file()):
            super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLogger(_KeepStaged, JsonLoggerCallback):
    """``result.json`` per trial; keeps this driver's rows across trial restarts."""


class CsvLogger(_KeepStaged, CSVLoggerCallback):
    """``progress.csv`` per trial; keeps this driver's rows across trial restarts."""


def result_loggers() -> list[Any]:
    """Fresh instances for a Tuner's callbacks (Tune then adds no stock JSON/CSV logger of its own)."""
    return [JsonLogger(), CsvLogger()]
