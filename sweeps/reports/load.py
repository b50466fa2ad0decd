"""A stored sweep's trials and summary: from its Ray results, else rebuilt from its MLflow runs.

The sweep index (:mod:`sweeps.store`) finds a sweep; its Ray results folder (Tune's experiment state and each
trial's ``result.json``) gives the trial records; :mod:`sweeps.reports.summary` does the rest.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sweeps import uris
from sweeps.config import stored
from sweeps.errors import SweepsError
from sweeps.reports import summary
from sweeps.reports.outline import date_text, fmt, num
from sweeps.reports.summary import Summary
from sweeps.store import SweepRecord

log = logging.getLogger(__name__)


class NoResults(SweepsError):
    """A sweep whose Ray results are gone (or were never written)."""


def load_sweep(rec: SweepRecord) -> tuple[list[Any], Summary]:
    """A sweep's trial records and summary: from its Ray results folder(s), else from its MLflow runs. A sweep
    that is not running keeps what was read as its trial index (:mod:`sweeps.reports.trialindex`).

    Raises:
        NoResults: when neither the Ray results nor the sweep's MLflow runs can be read.
    """
    from sweeps.reports.results import load_records

    sweep = stored.of(rec)
    metric, mode = sweep.metric, sweep.mode
    settings = summary.settings_of(sweep)
    if any(uris.is_dir(d) for d in rec.experiment_dirs):
        records = load_records(rec.experiment_dirs, metric, mode, settings["max_epochs"],
                               settled=rec.status == "finished", keep=rec.status != "running")
    else:
        log.warning(
            "sweep %s: Ray results gone (%s); rebuilding from its MLflow runs",
            rec.sweep_id,
            ", ".join(rec.experiment_dirs),
        )
        records = records_from_mlflow(rec)
    summ = summary.collect(records, metric, mode, wall_s=rec.wall_s, slots=rec.slots, **settings)
    return records, summ


def _param_value(text: str) -> Any:
    """MLflow keeps params as strings: give numbers back their type."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _mlflow_history(c: Any, run: Any) -> list[dict[str, float]]:
    """A child run's metric histories -> one row per step, like Tune's result.json rows.

    The tracker's ``hp/<name>`` metrics (the hyperparameters in force at each step) become ``config/<name>``,
    which :func:`sweeps.summary.collect` reads as the trial's hyperparameter schedule.
    """
    rows: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        name = summary.CONFIG_PREFIX + key[3:] if key.startswith("hp/") else key
        for m in c.get_metric_history(run.info.run_id, key):
            rows.setdefault(int(m.step), {"training_iteration": float(m.step)})[name] = float(m.value)
    return [rows[step] for step in sorted(rows)]


def records_from_mlflow(rec: SweepRecord) -> list[Any]:
    """The sweep's trials rebuilt from its nested MLflow runs (params, metric histories, status tags).

    Raises:
        NoResults: when the store is gone or holds no trial run of this sweep.
    """
    from sweeps.reports.results import TrialRecord
    from sweeps.tracking import client as mc

    uri = rec.tracking_uri
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        raise NoResults(
            f"sweep {rec.sweep_id}: its Ray results ({', '.join(rec.experiment_dirs)}) and its "
            f"MLflow store ({uri}) are both gone; nothing to report"
        )
    if not rec.parent_run_id or not rec.mlflow_experiment_id:
        raise NoResults(f"sweep {rec.sweep_id}: its Ray results are gone and it has no MLflow parent run")
    mc.probe(uri)
    c = mc.client(uri)
    runs = mc.find_runs(
        c, [rec.mlflow_experiment_id], f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}'"
    )
    if not runs:
        raise NoResults(
            f"sweep {rec.sweep_id}: its Ray results are gone and MLflow ({uri}) has no trial runs "
            f"under parent run {rec.parent_run_id}"
        )
    space = stored.of(rec).space
    status_of = {"FINISHED": "TERMINATED", "FAILED": "ERROR", "KILLED": "KILLED"}
    records = []
    for run in sorted(runs, key=lambda r: r.data.tags.get(mc.RUN_TAG_TRIAL, "")):
        tags, params = run.data.tags, run.data.params
        names = [k for k in space if k in params] or list(params)  # the space's order, as Tune's
        records.append(
            TrialRecord(
                trial_id=tags.get(mc.RUN_TAG_TRIAL, run.info.run_id),
                status=tags.get("status") or status_of.get(run.info.status, run.info.status),
                params={k: _param_value(params[k]) for k in names},
                history=_mlflow_history(c, run),
                early_stopped=tags.get("early_stopped") == "true",
                error=tags.get("error") or None,
                best_checkpoint=tags.get("best_checkpoint") or None,
            )
        )
    return records


def default_report_dir(rec: SweepRecord) -> Path:
    """``<report.dir>/<experiment>/<sweep id>`` (report.dir is ``reports`` unless the sweep set it)."""
    return Path(stored.of(rec).report.dir) / rec.experiment / rec.sweep_id


def list_frame(records: list[SweepRecord]) -> Any:
    """Past sweeps, oldest first: id, experiment, date, status (a running sweep whose driver's lease holds is
    "running (live)"; `python -m sweeps status ID` says more), best metric, trials."""
    import pandas as pd

    rows = []
    for r in records:
        metric = stored.of(r).metric
        value = (r.best or {}).get("value")
        best = f"{metric}={fmt(num(value))}" if num(value) is not None else "-"
        rows.append(
            {
                "sweep_id": r.sweep_id,
                "experiment": r.experiment,
                "date": date_text(r.created),
                "status": ("running (live)" if r.owner_alive() else r.status) if r.status == "running" else r.status,
                "best": best,
                "trials": (r.counts or {}).get("total", "-"),
            }
        )
    return pd.DataFrame(rows, columns=["sweep_id", "experiment", "date", "status", "best", "trials"])
