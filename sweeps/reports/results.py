"""Trial records read back from a sweep's Ray storage: the one input of reports, summaries and promotion.

Reads Tune's experiment folder (``experiment_state-*.json`` + each trial's ``result.json``) without a running
Ray cluster, so reports can be rebuilt at any time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    best_checkpoint: str | None = None
    num_failures: int = 0

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


def read_history(trial_dir: str | Path) -> list[dict[str, float]]:
    path = Path(trial_dir, "result.json")
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(_numeric(json.loads(line)))
            except ValueError:
                continue  # a half-written last line after a crash
    return rows


def _best_checkpoint(trial: Any, metric: str, mode: str) -> str | None:
    """The trial's best remaining checkpoint folder by the sweep metric (Tune keeps the top-k)."""
    if not trial.path:
        return None
    best: tuple[float, str] | None = None
    for d in sorted(Path(trial.path).glob("checkpoint_*")):
        meta = d / "meta.json"
        score = None
        if meta.is_file():
            try:
                score = json.loads(meta.read_text()).get(metric)
            except ValueError:
                score = None
        if not isinstance(score, int | float) or not math.isfinite(score):
            score = -math.inf
        elif mode == "min":
            score = -score
        if best is None or score >= best[0]:
            best = (score, str(d))
    return best[1] if best else None


def error_path(trial: Any) -> Path | None:
    """The trial's error file in storage (``trial.error_file`` needs a live Ray session; this does not)."""
    name = getattr(trial.run_metadata, "error_filename", None)
    if not name:
        return None
    candidates = [Path(trial.path, name)] if trial.path else []
    try:
        if trial.error_file:  # the driver's staging copy, while Ray runs
            candidates.append(Path(trial.error_file))
    except AssertionError:  # no Ray session
        pass
    return next((p for p in candidates if p.is_file()), None)


def epochs_of(config: dict[str, Any]) -> int | None:
    """The per-trial epoch budget from a sweep's stored config (``trainable.params.epochs``)."""
    epochs = ((config.get("trainable") or {}).get("params") or {}).get("epochs")
    return int(epochs) if isinstance(epochs, int) else None


def load_for(rec: Any) -> list[TrialRecord]:
    """All trials of a stored sweep (a :class:`sweeps.store.SweepRecord`)."""
    return load_records(rec.experiment_dirs, rec.metric, rec.mode, epochs_of(rec.config),
                        settled=rec.status == "finished")


def load_records(experiment_dirs: list[str], metric: str, mode: str, epochs: int | None = None,
                 settled: bool = False) -> list[TrialRecord]:
    """All trials of a sweep (over its original run and any extensions).

    ``settled``: the sweep ended normally, so a trial a scheduler left PAUSED (HyperBand never resumes the
    losers of a bracket) is over: it counts as TERMINATED (early-stopped if it ran short of its epochs).
    """
    from ray.tune import ExperimentAnalysis

    records: list[TrialRecord] = []
    for exp_dir in experiment_dirs:
        if not Path(exp_dir).is_dir() or not list(Path(exp_dir).glob("experiment_state-*.json")):
            continue
        analysis = ExperimentAnalysis(exp_dir)
        for trial in analysis.trials:
            history = read_history(trial.path) if trial.path else []
            last = history[-1] if history else {}
            status = "TERMINATED" if settled and trial.status == "PAUSED" else trial.status
            epoch = last.get("epoch", last.get("training_iteration"))
            budget = (trial.config or {}).get("epochs", epochs)
            # Tune marks a scheduler-stopped trial done=True too: compare with the epoch budget instead.
            early = bool(status == "TERMINATED" and budget and epoch is not None and epoch < budget)
            error = None
            err_file = error_path(trial)
            if status == "ERROR" and err_file is not None:
                text = err_file.read_text(errors="replace").strip().splitlines()
                error = text[-1] if text else "error"
            records.append(TrialRecord(
                trial_id=trial.trial_id, status=status,
                params={k: v for k, v in (trial.config or {}).items() if not str(k).startswith("_")},
                history=history, early_stopped=early, error=error, path=trial.path,
                best_checkpoint=_best_checkpoint(trial, metric, mode), num_failures=trial.num_failures,
            ))
    return records


def read_param_schedules(records: list[TrialRecord]) -> dict[str, dict[str, tuple[tuple[int, Any], ...]]]:
    """``{trial_id: {param: ((iteration, value), ...)}}`` for each parameter whose value changed in a trial.

    Tune writes the trial's config into each ``result.json`` row; PBT's explore step changes it mid-trial.
    Only the changes are kept (the first value, then each new one), so ASHA/FIFO trials yield nothing.
    """
    out: dict[str, dict[str, tuple[tuple[int, Any], ...]]] = {}
    for rec in records:
        path = Path(rec.path, "result.json") if rec.path else None
        if path is None or not path.is_file():
            continue
        seqs: dict[str, list[tuple[int, Any]]] = {}
        for i, line in enumerate(path.read_text().splitlines(), 1):
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                continue  # a half-written last line after a crash
            if not isinstance(row, dict) or not isinstance(row.get("config"), dict):
                continue
            step = int(row.get("training_iteration", i))
            for k, v in row["config"].items():
                if str(k).startswith("_"):
                    continue
                seq = seqs.setdefault(str(k), [])
                if not seq or seq[-1][1] != v:
                    seq.append((step, v))
        changed = {k: tuple(v) for k, v in seqs.items() if len(v) > 1}
        if changed:
            out[rec.trial_id] = changed
    return out
