"""``sync``: back-fill MLflow from a sweep's Ray results, idempotently, and close runs left open.

For each trial: find (or create) its child run, log the metric steps MLflow does not have yet, make or bring
up to date its model (its best checkpoint still in storage: :mod:`sweeps.tracking.models`; a trial that has
not ended gets status ``unfinished``), and set the final status from Tune's (TERMINATED -> FINISHED, ERROR ->
FAILED, anything else -> KILLED). Then the models are ranked as the report ranks the trials, and the parent run
names the best (``sweeps.best_model_id``). Running it twice changes nothing the second time.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweeps import store
from sweeps.config import stored
from sweeps.ops.heartbeat import refuse_if_live
from sweeps.reports import trialindex
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


def model_status(trial: TrialRecord) -> str:
    """The model's ``sweeps.status`` from Tune's: a trial that has not ended (an interrupted sweep) is
    ``unfinished``, never ``completed``."""
    if trial.status == "ERROR":
        return "failed"
    if trial.status != "TERMINATED":
        return "unfinished"
    return "early-stopped" if trial.early_stopped else "completed"


def _best_row(trial: TrialRecord) -> dict[str, Any]:
    """The ``result.json`` row that reported the trial's best checkpoint (its time and numbers)."""
    from sweeps.tracking.bestbook import stored_rows
    from sweeps.trials import stored_checkpoints

    rows = stored_checkpoints(trial.path, stored_rows(trial.path)) if trial.path else []
    return next((dict(row) for uri, row in rows if uri == trial.best_checkpoint),
                next((dict(h) for h in trial.history if h.get("training_iteration") == trial.best_checkpoint_iteration),
                     {}))


def _model(c: Any, rec: store.SweepRecord, run: Any, run_id: str, trial: TrialRecord) -> str:
    """The trial's LoggedModel for its best checkpoint, made or brought up to date (never a second one), or its
    run's ``checkpoint/`` artifacts on a store without LoggedModels; what was done (``made``, ``replaced``,
    ``updated``, ``unchanged``, ``artifacts``, ``error``, or "" for a trial without a checkpoint). An error
    is the trial's own: said, tagged ``sweeps.model_error`` on its run, and the sync goes on."""
    from sweeps import uris
    from sweeps.tracking import models
    from sweeps.tracking.bestbook import LINEAGE_TAG, donor_in

    if not trial.best_checkpoint:
        return ""
    tags = run.data.tags if run is not None else {}
    try:
        if models.supported(c, rec.tracking_uri):
            best = _best_row(trial)
            try:
                return models.upsert(c, rec.mlflow_experiment_id, run_id, rec.sweep_id, trial.trial_id,
                                     trial.best_checkpoint, best, trial.params, model_status(trial),
                                     donor=donor_in(tags.get(LINEAGE_TAG), best.get("timestamp")),
                                     dataset=stored.of(rec).trainable.dataset).action
            except Exception as exc:
                if not models.missing_api(exc):
                    raise
                models.degrade(rec.tracking_uri, exc)
        # the run's top level only: MLflow 3's list_artifacts(run, path) also searches LoggedModels (a 404 here)
        if any(a.path == "checkpoint" for a in c.list_artifacts(run_id)):
            return "unchanged"
        with uris.local_copy(trial.best_checkpoint) as folder:
            c.log_artifacts(run_id, folder, artifact_path="checkpoint")
        return "artifacts"
    except Exception as exc:  # noqa: BLE001 - one trial's model; the others and the runs go on
        log.warning("sync: no model for trial %s (%s)", trial.trial_id, exc)
        c.set_tag(run_id, "sweeps.model_error", str(exc).strip().splitlines()[0][:500] if str(exc).strip() else
                  type(exc).__name__)
        return "error"


def _rank(c: Any, rec: store.SweepRecord, trials: list[TrialRecord]) -> str | None:
    """The models ranked as the report ranks the trials; the best model's id (named on the parent run)."""
    from sweeps.reports.summary import collect
    from sweeps.tracking import models

    if not rec.mlflow_experiment_id or not models.supported(c, rec.tracking_uri):
        return None
    return models.rank(c, rec.mlflow_experiment_id, rec.sweep_id, collect(trials, rec.metric, rec.mode).ranked,
                       rec.parent_run_id)


def sync(sweep_id: str) -> dict[str, Any]:
    """Bring MLflow in line with the sweep's Ray results. Returns counts of what changed (``runs_created``,
    ``metrics_logged``, ``statuses_set``, ``models_made``, ``models_updated``, ``model_errors``) and the best
    model's id (``best_model_id``, None without models)."""
    rec = store.load(sweep_id)
    refuse_if_live(rec, "sync")
    c = mc.client(rec.tracking_uri)
    mc.close_stale_runs(c)
    trials = load_records(rec.experiment_dirs, rec.metric, rec.mode, settled=rec.status == "finished")
    children = _child_runs(c, rec)
    counts: dict[str, Any] = {"runs_created": 0, "metrics_logged": 0, "statuses_set": 0, "models_made": 0,
                              "models_updated": 0, "model_errors": 0}
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
        done = _model(c, rec, run, run_id, trial)
        key = {"made": "models_made", "artifacts": "models_made", "replaced": "models_updated",
               "updated": "models_updated", "error": "model_errors"}.get(done)
        if key:
            counts[key] += 1
        final = STATUS.get(trial.status, "KILLED")
        if status_now != final:
            c.set_terminated(run_id, status=final)
            counts["statuses_set"] += 1
    if rec.parent_run_id and c.get_run(rec.parent_run_id).info.status == "RUNNING" and rec.status != "running":
        final = {"finished": "FINISHED", "interrupted": "KILLED"}.get(rec.status, "FAILED")
        c.set_terminated(rec.parent_run_id, status=final)
        counts["statuses_set"] += 1
    counts["best_model_id"] = _rank(c, rec, trials)
    trialindex.forget_models(rec)  # a model made or replaced here is not among the ids a report kept
    return counts
