"""What Ray Tune recorded about a trial: its folder and its best checkpoint, as URIs, from public surfaces only.

Shared by the tracker (a live Tune callback) and the reports (an experiment read back from storage), so both
name the same checkpoint for a trial: :func:`best_of` ranks the checkpoints a trial reported by the sweep's
metric as Tune's checkpoint retention does (``CheckpointConfig(checkpoint_score_attribute, order)``: NaN
never best, the newest of equal scores first), and Tune never deletes the one it ranks best. The live side
collects ``(checkpoint, result)`` pairs from Tune's ``on_checkpoint`` hook (:class:`CheckpointBook`); the
stored side pairs each ``checkpoint_*`` folder of the trial with the ``result.json`` row that named it
(``checkpoint_dir_name``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from sweeps import uris

ERROR_FILE = "error.txt"  # Tune's name for a trial's traceback in its folder (ray.tune.result.EXPR_ERROR_FILE)


def trial_location(trial: Any, fs: Any | None = None) -> str | None:
    """A Tune trial's folder as a URI (``trial.path`` has no scheme for an object store: ``fs`` is the storage
    filesystem, from :func:`sweeps.uris.filesystem` of the experiment's URI)."""
    if not trial.path:
        return None
    return uris.to_uri(trial.path, fs)


def _score(metrics: Mapping[str, Any], metric: str, mode: str) -> tuple[bool, float]:
    value = metrics.get(metric)
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return False, 0.0
    return True, float(value) if mode == "max" else -float(value)


def best_of(checkpoints: Iterable[tuple[str, Mapping[str, Any]]], metric: str,
            mode: str) -> tuple[str, dict[str, Any]] | None:
    """The best of ``(uri, metrics)`` pairs in report order: (URI, its metrics), or None (no finite score)."""
    best: tuple[tuple[bool, float], str, dict[str, Any]] | None = None
    for uri, metrics in checkpoints:
        score = _score(metrics, metric, mode)
        if score[0] and (best is None or score >= best[0]):  # >=: the newest of equal scores
            best = (score, uri, dict(metrics))
    return (best[1], best[2]) if best else None


class CheckpointBook:
    """Every checkpoint each trial reported, with the result it came with (fed from Tune's ``on_checkpoint``)."""

    def __init__(self, metric: str, mode: str) -> None:
        self.metric, self.mode = metric, mode
        self.reported: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    def add(self, trial_id: str, checkpoint: Any, result: Mapping[str, Any] | None) -> None:
        uri = uris.to_uri(checkpoint.path, checkpoint.filesystem)
        self.reported.setdefault(trial_id, []).append((uri, dict(result or {})))

    def best(self, trial_id: str) -> tuple[str, dict[str, Any]] | None:
        return best_of(self.reported.get(trial_id, []), self.metric, self.mode)

    def ranked(self, trial_id: str) -> list[str]:
        """The trial's checkpoint URIs, best first (Tune's retention order)."""
        rows = self.reported.get(trial_id, [])
        order = sorted(range(len(rows)), key=lambda i: (_score(rows[i][1], self.metric, self.mode), i), reverse=True)
        return [rows[i][0] for i in order]

    def forget(self, trial_id: str) -> None:
        self.reported.pop(trial_id, None)


def stored_checkpoints(trial_dir: str, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The checkpoints still in a stored trial folder, each with the ``result.json`` row that reported it."""
    try:
        present = {n for n in uris.listdir(trial_dir) if n.startswith("checkpoint_")}
    except (FileNotFoundError, OSError):
        return []
    return [(uris.join(trial_dir, str(r["checkpoint_dir_name"])), r) for r in rows
            if r.get("checkpoint_dir_name") in present]


def config_digest(params: dict[str, Any]) -> str:
    """A short stable name for a configuration: its hyperparameters without the seed (the same config re-run
    with other seeds shares the digest; the MLflow UI groups runs by it)."""
    import hashlib
    import json

    key = {k: v for k, v in params.items() if k != "seed" and not str(k).startswith("_")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def error_text(trial: Any, fs: Any | None = None) -> str:
    """The trial's error file (Tune writes it, in the driver's staging copy of the trial folder, before calling
    ``on_trial_error``; in storage after its next sync), or a placeholder."""
    try:
        local = trial.error_file  # Trial (a Tune DeveloperAPI): the staging copy's path
    except AssertionError:  # no Ray session
        local = None
    if local and os.path.isfile(local):
        with open(local, errors="replace") as f:
            return f.read()
    location = trial_location(trial, fs)
    if location:
        try:
            return uris.read_text(uris.join(location, ERROR_FILE), errors="replace")
        except (FileNotFoundError, OSError):
            pass
    return "unknown error"
