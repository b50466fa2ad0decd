"""Each trial's best checkpoint as an MLflow 3 LoggedModel: the experiment's Models tab is the sweep's leaderboard.

A trial's model is named ``<sweep>-<trial>``, its source run is the trial's child run, its parameters are the
trial's, its metrics are those of the best checkpoint's report (logged on the run with the model's id, at that
step), and its tags say the sweep, the trial, how the trial ended, its rank in the report and, for PBT, the
donor it was cloned from. Its artifacts are the checkpoint's files, stored once (no copy beside the run). A
model is found again by its sweep and trial tags, so ``resume``, ``sync`` and a retried write update it rather
than make a second. A store that cannot hold LoggedModels (a server before MLflow 3) keeps the checkpoint as
the run's artifacts, said once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sweeps import uris

log = logging.getLogger(__name__)

TAG_SWEEP, TAG_TRIAL, TAG_KIND = "sweeps.sweep_id", "sweeps.trial_id", "sweeps.model_kind"
TAG_STATUS, TAG_RANK, TAG_STEP = "sweeps.status", "sweeps.rank", "sweeps.best_step"
TAG_CKPT, TAG_DONOR, TAG_SOURCE = "sweeps.checkpoint", "sweeps.donor", "sweeps.source_model_id"
SKIP = {"training_iteration", "timestamp", "time_this_iter_s", "time_total_s", "time_since_restore",
        "iterations_since_restore", "pid", "done", "trial_id", "date", "hostname", "node_ip", "config"}
_unsupported: dict[str, str] = {}  # store URI -> why it holds no LoggedModels (said once)


def supported(client: Any, uri: str) -> bool:
    """Whether the store holds LoggedModels: any MLflow 3 store; a server from before MLflow 3 does not."""
    if uri in _unsupported:
        return False
    if uri.startswith(("http://", "https://")):
        from sweeps.tracking.versions import server_version

        theirs = server_version(uri)
        if theirs and int(theirs.split(".")[0]) < 3:
            return _refuse(uri, f"the MLflow server runs {theirs}")
    return True


def _refuse(uri: str, why: str) -> bool:
    if uri not in _unsupported:
        _unsupported[uri] = why
        log.warning("MLflow: %s, which has no LoggedModels: each trial's best checkpoint goes to its run's "
                    "artifacts instead (the Models tab stays empty)", why)
    return False


def find(client: Any, experiment_id: str, sweep_id: str, trial_id: str) -> Any:
    """The trial's model, or None."""
    found = client.search_logged_models(
        [experiment_id], filter_string=f"tags.`{TAG_SWEEP}` = '{sweep_id}' AND tags.`{TAG_TRIAL}` = '{trial_id}'",
        max_results=2)
    return found[0] if found else None


def of_sweep(client: Any, experiment_id: str, sweep_id: str) -> dict[str, str]:
    """Trial id -> model id, for every trial model of the sweep."""
    out: dict[str, str] = {}
    token = None
    while True:
        page = client.search_logged_models([experiment_id], filter_string=f"tags.`{TAG_SWEEP}` = '{sweep_id}'",
                                           max_results=500, page_token=token)
        out.update({m.tags[TAG_TRIAL]: m.model_id for m in page
                    if TAG_TRIAL in m.tags and m.tags.get(TAG_KIND, "trial") == "trial"})
        token = getattr(page, "token", None)
        if not token:
            return out


def metrics_of(result: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in result.items() if k not in SKIP and not str(k).startswith(("config/", "_"))
            and isinstance(v, int | float) and not isinstance(v, bool)}


def upsert(client: Any, experiment_id: str, run_id: str, sweep_id: str, trial_id: str, checkpoint: str,
           result: Mapping[str, Any], params: Mapping[str, Any], status: str, donor: str | None = None,
           dataset: tuple[str, str] | None = None) -> str:
    """The trial's model for its best ``checkpoint`` (made, or brought up to date); its id.

    ``status``: ``completed``, ``early-stopped`` or ``failed`` (a failed trial's model is FAILED); ``dataset``:
    the (name, digest) the trainable declares, which its metrics are linked to."""
    from mlflow.entities import Metric

    model = find(client, experiment_id, sweep_id, trial_id)
    tags = {TAG_SWEEP: sweep_id, TAG_TRIAL: trial_id, TAG_KIND: "trial", TAG_STATUS: status, TAG_CKPT: checkpoint,
            TAG_STEP: str(result.get("training_iteration", "")), **({TAG_DONOR: donor} if donor else {})}
    if model is None:
        model = client.create_logged_model(experiment_id, name=f"{sweep_id}-{trial_id}", source_run_id=run_id,
                                           tags=tags, params={str(k): str(v)[:6000] for k, v in params.items()})
    else:
        client.set_logged_model_tags(model.model_id, tags)
    if (model.tags or {}).get(TAG_CKPT) != checkpoint or model.status != "READY":
        with uris.local_copy(checkpoint) as folder:
            client.log_model_artifacts(model.model_id, folder)
    step = int(result.get("training_iteration", 0) or 0)
    # the report's own time: the run's latest value stays its last report's, the model's is its best one's
    when = int(float(result.get("timestamp") or time.time()) * 1000)
    name, digest = dataset or (None, None)
    metrics = [Metric(k, v, when, step, model_id=model.model_id, dataset_name=name, dataset_digest=digest)
               for k, v in metrics_of(result).items()]
    for i in range(0, len(metrics), 900):
        client.log_batch(run_id, metrics=metrics[i:i + 900])
    client.finalize_logged_model(model.model_id, "FAILED" if status == "failed" else "READY")
    return str(model.model_id)


def rank(client: Any, experiment_id: str, sweep_id: str, ranked: Iterable[str], parent_run_id: str = "") -> str | None:
    """Tag each trial model with its place in the report (1 = best); the parent run names the best model."""
    ids = of_sweep(client, experiment_id, sweep_id)
    best = None
    for place, trial_id in enumerate(ranked, 1):
        if trial_id in ids:
            client.set_logged_model_tags(ids[trial_id], {TAG_RANK: str(place)})
            best = best or ids[trial_id]
    if best and parent_run_id:
        client.set_tag(parent_run_id, "sweeps.best_model_id", best)
    return best


def ids_for(rec: Any) -> dict[str, str]:
    """Trial id -> model id of a stored sweep (its record's store), {} when the store cannot say."""
    from sweeps.tracking.client import client

    if not rec.mlflow_experiment_id:
        return {}
    try:
        return of_sweep(client(rec.tracking_uri), rec.mlflow_experiment_id, rec.sweep_id)
    except Exception as exc:  # an unreachable store, or one without LoggedModels: the report goes without
        log.debug("no model ids for %s (%s)", rec.sweep_id, exc)
        return {}
