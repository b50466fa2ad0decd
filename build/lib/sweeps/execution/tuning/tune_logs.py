"""Tune's result loggers (``result.json``, ``progress.csv``): the ``tune_log_restore`` lever's, or Tune's own.

Imported only where Ray is already loaded (building a Tuner).
"""

from __future__ import annotations

from typing import Any


def result_loggers() -> list[Any]:
    """Fresh instances for a Tuner's callbacks (Tune then adds no stock JSON/CSV logger of its own)."""
    from sweeps.execution.levers import core, tune_log_restore

    if core.applies(tune_log_restore.LEVER):
        return [tune_log_restore.JsonLogger(), tune_log_restore.CsvLogger()]
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]
