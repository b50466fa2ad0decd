"""Tune's result loggers (``result.json``, ``progress.csv``): the ``tune_log_restore`` lever's, or Tune's own; and no
TensorBoard logger of Tune's own (:func:`without_tensorboard`).

Imported only where Ray is already loaded (building a Tuner).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

# Tune adds the loggers a Tuner was not given (CSV, JSON, TensorBoard) unless this is "1".
AUTO_LOGGERS = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"


def result_loggers() -> list[Any]:
    """Fresh instances for a Tuner's callbacks (Tune then adds no stock JSON/CSV logger of its own)."""
    from sweeps.execution.levers import core, tune_log_restore

    if core.applies(tune_log_restore.LEVER):
        return [tune_log_restore.JsonLogger(), tune_log_restore.CsvLogger()]
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]


@contextlib.contextmanager
def without_tensorboard() -> Iterator[None]:
    """Around ``Tuner.fit()``: Tune adds no TensorBoard logger of its own (the sweep's figures are in MLflow; an
    event-file writer with its thread per running trial, and a driver that grows with each trial, for files
    nothing reads). The JSON and CSV loggers are given to the Tuner (:func:`result_loggers`), so they stay. A
    user who wants Tune's event files sets ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=0``."""
    if AUTO_LOGGERS in os.environ:
        yield
        return
    os.environ[AUTO_LOGGERS] = "1"
    try:
        yield
    finally:
        os.environ.pop(AUTO_LOGGERS, None)
