"""Trial records read back from a sweep's Ray storage: the one input of reports, summaries and promotion.

Reads Tune's experiment folder (``experiment_state-*.json`` + each trial's ``result.json``) without a running
Ray cluster, so reports can be rebuilt at any time. Every location is a URI (:mod:`sweeps.uris`): a local
folder or an object store.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeps import uris
from sweeps.config import stored
from sweeps.trials import ERROR_FILE, best_of, stored_checkpoints, trial_location

HISTORY_SKIP = {"config", "date", "hostname", "node_ip", "pid", "trial_id", "experiment_tag", "done",
                "checkpoint_dir_name", "should_checkpoint", "timestamp"}


@dataclass
class TrialRecord:
    """One trial, as a report needs it. ``history`` holds one dict of numeric metrics per reported step."""

    trial_id: str
    status: str  # TERMINATED | ERROR | RUNNING | PENDING | PAUSED
    params: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)
    early_stopped: bool = False
    error: str | None = None
    path: str | None = None
    best_checkpoint: str | None = None  # Tune's best kept checkpoint by the sweep metric, as a URI
    num_failures: int = 0
    best_checkpoint_value: float | None = None  # the sweep metric Tune recorded with that checkpoint
    best_checkpoint_iteration: int | None = None
    error_file: str | None = None  # the trial's full traceback, in storage
    # {param: ((iteration, value), ...)} for each parameter whose value changed (PBT); None: not read yet
    schedule: dict[str, tuple[tuple[int, Any], ...]] | None = None

    def values(self, metric: str) -> list[float]:
        return [h[metric] for h in self.history if metric in h]

    @property
    def iterations(self) -> int:
        return int(max((h.get("training_iteration", 0) for h in self.history), default=0))

    @property
    def wall_s(self) -> float:
        return float(max((h.get("time_total_s", 0.0) for h in self.history), default=0.0))

    @property
    def nonfinite(self) -> bool:
        return any(h.get("sweeps/nonfinite") for h in self.history)


def _numeric(row: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k in HISTORY_SKIP or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        out[k] = float(v)
    if "sweeps/nonfinite" in out:  # the sweep metric was sanitized: put the raw NaN back for reports
        for k in list(out):
            if k.endswith("/raw"):
                out[k[: -len("/raw")]] = math.nan
    return out


def _rows(trial_dir: str) -> list[dict[str, Any]]:
    """Each row of a trial's ``result.json`` (a half-written last line after a crash is skipped)."""
    from sweeps.tracking.bestbook import stored_rows

    return stored_rows(trial_dir)


def _checkpoint_fields(trial_dir: str, rows: list[dict[str, Any]], metric: str, mode: str) -> dict[str, Any]:
    """The trial's best checkpoint still in storage (:func:`sweeps.trials.best_of`, the ranking the tracker
    uses too), with the sweep metric and iteration of the report that made it."""
    found = best_of(stored_checkpoints(trial_dir, rows), metric, mode)
    if found is None:
        return {}
    location, metrics = found
    value = metrics.get(metric)
    iteration = metrics.get("training_iteration")
    return {"best_checkpoint": location,
            "best_checkpoint_value": float(value) if isinstance(value, int | float) else None,
            "best_checkpoint_iteration": int(iteration) if isinstance(iteration, int | float) else None}


def error_file(trial_dir: str | None) -> str | None:
    """Where the trial's error (its traceback) is in storage, if Tune wrote one."""
    if not trial_dir:
        return None
    location = uris.join(trial_dir, ERROR_FILE)
    return location if uris.exists(location) else None


def error_text(location: str | None) -> str | None:
    """The last line of a trial's error file (works without a Ray session)."""
    if not location:
        return None
    try:
        lines = uris.read_text(location, errors="replace").strip().splitlines()
    except (FileNotFoundError, OSError):
        return None
    return lines[-1] if lines else "error"


def epochs_of(config: dict[str, Any]) -> int | None:
    """The per-trial epoch budget of a sweep's stored config (``trainable.params.epochs``), for a caller that
    holds only the record's JSON."""
    return stored.read(config).epochs


def load_records(experiment_dirs: list[str], metric: str, mode: str, epochs: int | None = None,
                 settled: bool = False, keep: bool = False) -> list[TrialRecord]:
    """All trials of a sweep (over its original run and any extensions).

    ``settled``: the sweep ended normally, so a trial a scheduler left PAUSED (HyperBand never resumes the
    losers of a bracket) is over: it counts as TERMINATED (early-stopped if it ran short of its epochs).
    ``keep``: keep what was read as each experiment's trial index (:mod:`sweeps.reports.trialindex`; the driver
    does, as the sweep's run ends); an index that still matches the experiment's state is read in its place.
    """
    from sweeps.execution.levers.tune_files import STATE_PREFIX
    from sweeps.reports import trialindex

    settings = {"metric": metric, "mode": mode, "epochs": epochs, "settled": settled}
    records: list[TrialRecord] = []
    for exp_dir in experiment_dirs:
        names = uris.listdir(exp_dir)
        if not any(n.startswith(STATE_PREFIX) for n in names):
            continue
        indexed = trialindex.read(exp_dir, names, settings, TrialRecord)
        if indexed is None:
            indexed = _from_tune(exp_dir, metric, mode, epochs, settled)
            if keep:
                trialindex.write(exp_dir, names, settings, [asdict(r) for r in indexed])
        records.extend(indexed)
    return records


def _from_tune(exp_dir: str, metric: str, mode: str, epochs: int | None, settled: bool) -> list[TrialRecord]:
    from sweeps.execution.levers import tune_trials

    fs, _ = uris.filesystem(exp_dir)
    out = []
    for trial in tune_trials.trials(exp_dir):
        record = _record(trial, metric, mode, epochs, settled, fs)
        if settled and not record.history and record.status == "TERMINATED":
            continue  # queued but never started before the sweep ended (a time or resource budget)
        out.append(record)
    return out


def _record(trial: Any, metric: str, mode: str, epochs: int | None, settled: bool, fs: Any) -> TrialRecord:
    location = trial_location(trial, fs)
    rows = _rows(location) if location else []
    history = [_numeric(row) for row in rows]
    last = history[-1] if history else {}
    status = "TERMINATED" if settled and trial.status == "PAUSED" else trial.status
    iteration = last.get("training_iteration")  # what Tune counted, whatever the loop calls its epochs
    budget = (trial.config or {}).get("epochs", epochs)
    # Tune marks a scheduler-stopped trial done=True too: compare with the epoch budget instead.
    early = bool(status == "TERMINATED" and budget and iteration is not None and iteration < budget)
    err = error_file(location) if status == "ERROR" else None
    return TrialRecord(
        trial_id=trial.trial_id, status=status,
        params={k: v for k, v in (trial.config or {}).items() if not str(k).startswith("_")},
        history=history, early_stopped=early, error=error_text(err), error_file=err,
        path=location, num_failures=trial.num_failures, schedule=_schedule(rows),
        **(_checkpoint_fields(location, rows, metric, mode) if location else {}),
    )


def read_param_schedules(records: list[TrialRecord]) -> dict[str, dict[str, tuple[tuple[int, Any], ...]]]:
    """``{trial_id: {param: ((iteration, value), ...)}}`` for each parameter whose value changed in a trial.

    Tune writes the trial's config into each ``result.json`` row; PBT's explore step changes it mid-trial.
    Only the changes are kept (the first value, then each new one), so ASHA/FIFO trials yield nothing.
    """
    out: dict[str, dict[str, tuple[tuple[int, Any], ...]]] = {}
    for rec in records:
        changed = rec.schedule if rec.schedule is not None else _schedule(_rows(rec.path)) if rec.path else {}
        if changed:
            out[rec.trial_id] = changed
    return out


def _schedule(rows: list[dict[str, Any]]) -> dict[str, tuple[tuple[int, Any], ...]]:
    """The parameters whose value changed over a trial's result rows, each as its changes."""
    seqs: dict[str, list[tuple[int, Any]]] = {}
    for i, row in enumerate(rows, 1):
        if not isinstance(row.get("config"), dict):
            continue
        step = int(row.get("training_iteration", i))
        for k, v in row["config"].items():
            if str(k).startswith("_"):
                continue
            seq = seqs.setdefault(str(k), [])
            if not seq or seq[-1][1] != v:
                seq.append((step, v))
    return {k: tuple(v) for k, v in seqs.items() if len(v) > 1}
