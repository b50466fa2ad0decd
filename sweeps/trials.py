"""What Ray Tune recorded about a trial: its folder and its best kept checkpoint, as URIs.

Shared by the tracker (a live Tune callback) and the reports (an experiment read back from storage), so both
name the same checkpoint for a trial.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sweeps import uris


def trial_location(trial: Any) -> str | None:
    """A Tune trial's folder as a URI (``trial.path`` has no scheme for an object store)."""
    if not trial.path:
        return None
    fs = getattr(getattr(trial, "storage", None), "storage_filesystem", None)
    return uris.to_uri(trial.path, fs)


def best_checkpoint(trial: Any) -> tuple[str, dict[str, Any]] | None:
    """Tune's best kept checkpoint of a trial (by the sweep metric, as Tune ranked it): (URI, its metrics).

    The same answer on every path: the tracker tags the trial's run with it, promotion registers it.
    """
    manager = getattr(getattr(trial, "run_metadata", None), "checkpoint_manager", None)
    result = getattr(manager, "best_checkpoint_result", None)
    if result is None or result.checkpoint is None:
        return None
    return uris.to_uri(result.checkpoint.path, result.checkpoint.filesystem), dict(result.metrics or {})


def config_digest(params: dict[str, Any]) -> str:
    """A short stable name for a configuration: its hyperparameters without the seed (the same config re-run
    with other seeds shares the digest; the MLflow UI groups runs by it)."""
    import hashlib
    import json

    key = {k: v for k, v in params.items() if k != "seed" and not str(k).startswith("_")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def error_text(trial: Any) -> str:
    """The trial's error file (Tune writes it before calling ``on_trial_error``), or a placeholder."""
    try:
        path = trial.error_file
    except AssertionError:  # no Ray session
        path = None
    if path and os.path.isfile(path):
        return Path(path).read_text(errors="replace")
    return "unknown error"
