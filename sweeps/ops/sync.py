"""``sync``: back-fill MLflow from a sweep's Ray results, idempotently, and close runs left open.

For each trial: find (or create) its child run, log the metric steps MLflow does not have yet, and set the
final status from Tune's (TERMINATED -> FINISHED, ERROR -> FAILED, anything else -> KILLED). Running it
twice changes nothing the second time.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweeps import store
from sweeps.config import stored
from sweeps.ops.heartbeat import refuse_if_live
from sweeps.reports.results import TrialRecord, load_records
from sweeps.tracking import client as mc

log = logging.getLogger(__name__)
STATUS = {"TERMINATED": "FINISHED", "ERROR": "FAILED"}


def _child_runs(c: Any, rec: store.SweepRecord) -> dict[str, Any]:
    runs = mc.find_runs(c, [rec.mlflow_experiment_id],
                              f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}'")
    return {r.data.tags[mc.RUN_TAG_TRIAL]: r for r in runs if mc.RUN_TAG_TRIAL in r.data.tags}


def _missing_metrics(c: Any, run_id: str, trial: TrialRecord) -> list[Any]:
    from mlflow.entities import Metric

    have: dict[str, set[int]] = {}
    out = []
    now = int(time.time() * 1000)
    for row in trial.history:
        step = int(row.get("training_iteration", 0))
        for key, value in row.items():
            if key in mc.SKIP_RESULT_KEYS or key.startswith("config/"):
                continue
            if key not in have:
                have[key] = {m.step for m in c.get_metric_history(run_id, key)}
            if step not in have[key]:
                out.append(Metric(key, float(value), now, step))
                have[key].add(step)
    return out


def _model(c: Any, rec: store.SweepRecord, run_id: str, trial: TrialRecord) -> int:
    """The trial's LoggedModel for its best checkpoint, made or brought up to date (never a second one); 1 when
    it has one. A checkpoint missing from storage is said, not fatal."""
    from sweeps.tracking import models

    if not trial.best_checkpoint or not models.supported(c, rec.tracking_uri):
        return 0
    best = next((h for h in trial.history if h.get("training_iteration") == trial.best_checkpoint_iteration), {})
    status = "failed" if trial.status == "ERROR" else "early-stopped" if trial.early_stopped else "completed"
    try:
        models.upsert(c, rec.mlflow_experiment_id, run_id, rec.sweep_id, trial.trial_id, trial.best_checkpoint,
                      best, trial.params, status, dataset=stored.of(rec).trainable.dataset)
    except Exception as exc:  # noqa: BLE001 - one trial's model; the others and the runs go on
        log.warning("sync: no model for trial %s (%s)", trial.trial_id, exc)
        return 0
    return 1


def sync(sweep_id: str) -> dict[str, int]:
    """Bring MLflow in line with the sweep's Ray results. Returns counts of what changed."""
    rec = store.load(sweep_id)
    refuse_if_live(rec, "sync")
    c = mc.client(rec.tracking_uri)
    mc.close_stale_runs(c)
    trials = load_records(rec.experiment_dirs, rec.metric, rec.mode, settled=rec.status == "finished")
    children = _child_runs(c, rec)
    counts = {"runs_created": 0, "metrics_logged": 0, "statuses_set": 0, "models": 0}
    for trial in trials:
        run = children.get(trial.trial_id)
        if run is None:
            created = c.create_run(rec.mlflow_experiment_id, run_name=f"run_trial_{trial.trial_id}", tags={
                mc.PARENT_TAG: rec.parent_run_id, mc.RUN_TAG_SWEEP: rec.sweep_id,
                mc.RUN_TAG_TRIAL: trial.trial_id, mc.RUN_TAG_KIND: "trial", "synced": "true"})
            mc.log_params(c, created.info.run_id, trial.params)
            run_id = created.info.run_id
            counts["runs_created"] += 1
            status_now = "RUNNING"
        else:
            run_id, status_now = run.info.run_id, run.info.status
        missing = _missing_metrics(c, run_id, trial)
        for chunk in mc.chunks(missing, mc.MAX_METRICS):
            c.log_batch(run_id, metrics=chunk)
        counts["metrics_logged"] += len(missing)
        counts["models"] += _model(c, rec, run_id, trial)
        final = STATUS.get(trial.status, "KILLED")
        if status_now != final:
            c.set_terminated(run_id, status=final)
            counts["statuses_set"] += 1
    if rec.parent_run_id and c.get_run(rec.parent_run_id).info.status == "RUNNING" and rec.status != "running":
        final = {"finished": "FINISHED", "interrupted": "KILLED"}.get(rec.status, "FAILED")
        c.set_terminated(rec.parent_run_id, status=final)
        counts["statuses_set"] += 1
    return counts
