"""Each trial's best checkpoint as an MLflow 3 LoggedModel: the experiment's Models tab is the sweep's leaderboard.

A trial's model is named ``<sweep>-<trial>``, its source run is the trial's child run, its parameters are the
trial's, its metrics are those of the best checkpoint's report (logged on the run with the model's id, at that
step), and its tags say the sweep, the trial, how the trial ended, its rank in the report and, for PBT, the donor
the scoring checkpoint descends from. Its artifacts are the checkpoint's files, stored once (no copy beside the
run). A model is found again by its sweep and trial tags, so ``resume``, ``sync`` and a retried write update it
rather than make a second, also two ``sync`` at once (MLflow has no unique key on models: one writer at a time per
machine on a SQLite store, and checks after create across machines); when the trial's best checkpoint changed, the
model is replaced (its metrics were another checkpoint's). A store that cannot hold LoggedModels (a server of MLflow
2, by its ``/version`` or by the 404 its LoggedModel API answers) keeps the checkpoint as the run's artifacts, said
once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sweeps import uris

log = logging.getLogger(__name__)

TAG_SWEEP, TAG_TRIAL, TAG_KIND = "sweeps.sweep_id", "sweeps.trial_id", "sweeps.model_kind"
TAG_STATUS, TAG_RANK, TAG_STEP = "sweeps.status", "sweeps.rank", "sweeps.best_step"
TAG_CKPT, TAG_DONOR, TAG_SOURCE = "sweeps.checkpoint", "sweeps.donor", "sweeps.source_model_id"
TAG_CONFIRM = "sweeps.confirm"  # on a `sweeps confirm` re-run's model (kind "confirm": never ranked)
STATUSES = ("completed", "early-stopped", "stopped", "failed", "unfinished")  # TAG_STATUS values
SKIP = {"training_iteration", "timestamp", "time_this_iter_s", "time_total_s", "time_since_restore",
        "iterations_since_restore", "pid", "done", "trial_id", "date", "hostname", "node_ip", "config"}
PAGE = 500  # models per search_logged_models page
RANKED = 100  # the models tagged with their place in the report (``sweeps.rank``): the Models tab's leaderboard
_unsupported: dict[str, str] = {}  # store URI -> why it holds no LoggedModels (said once)


class Upserted(NamedTuple):
    """What :func:`upsert` did: the model's id and ``made``, ``replaced`` (a new checkpoint), ``updated`` or
    ``unchanged`` (also when a concurrent writer made the model first: its id)."""

    model_id: str
    action: str


def supported(client: Any, uri: str) -> bool:
    """Whether the store holds LoggedModels: any MLflow 3 store; a server of an earlier major version does not
    (its ``/version``; a server that does not say is found out by :func:`missing_api` at the first model)."""
    if uri in _unsupported:
        return False
    if uri.startswith(("http://", "https://")):
        import mlflow

        from sweeps.tracking.versions import older_major, server_version

        theirs = server_version(uri)
        if theirs and older_major(theirs, mlflow.__version__):
            return _refuse(uri, f"the MLflow server at {uri} runs MLflow {theirs}")
    return True


def missing_api(exc: BaseException) -> bool:
    """An answer saying the server has no LoggedModel API: HTTP 404, ``ENDPOINT_NOT_FOUND``."""
    from mlflow.exceptions import MlflowException

    return isinstance(exc, MlflowException) and exc.error_code == "ENDPOINT_NOT_FOUND"


def degrade(uri: str, exc: BaseException) -> None:
    """The store answered that it has no LoggedModel API: run artifacts from now on (said once)."""
    _refuse(uri, f"the MLflow server at {uri} answers 404 to its LoggedModel API ({str(exc).splitlines()[0][:120]})")


def _refuse(uri: str, why: str) -> bool:
    if uri not in _unsupported:
        _unsupported[uri] = why
        log.warning("MLflow: %s, which has no LoggedModels: each trial's best checkpoint goes to its run's "
                    "artifacts (checkpoint/) instead, and the Models tab stays empty", why)
    return False


def find(client: Any, experiment_id: str, sweep_id: str, trial_id: str) -> Any:
    """The trial's model, or None; of two (writers that raced before :func:`_yield` settled it) a finished one,
    else the first made."""
    found = client.search_logged_models(
        [experiment_id], filter_string=f"tags.`{TAG_SWEEP}` = '{sweep_id}' AND tags.`{TAG_TRIAL}` = '{trial_id}'",
        max_results=PAGE)
    return min(found, key=_standing, default=None)


def _standing(model: Any) -> tuple[bool, int, str]:
    """Of two models of one trial, the one that stands sorts first: a finished one, else the first made."""
    return str(model.status) == "PENDING", model.creation_timestamp or 0, str(model.model_id)


def of_sweep(client: Any, experiment_id: str, sweep_id: str, kind: str = "trial") -> dict[str, str]:
    """Trial id -> model id, for every model of the sweep of ``kind`` (``trial``; ``confirm``)."""
    return {m.tags[TAG_TRIAL]: str(m.model_id) for m in models_of(client, experiment_id, sweep_id, kind)}


def models_of(client: Any, experiment_id: str, sweep_id: str, kind: str = "trial") -> list[Any]:
    """Every model of the sweep of ``kind``, page by page."""
    out: list[Any] = []
    token = None
    while True:
        page = client.search_logged_models([experiment_id], filter_string=f"tags.`{TAG_SWEEP}` = '{sweep_id}'",
                                           max_results=PAGE, page_token=token)
        out += [m for m in page if TAG_TRIAL in m.tags and m.tags.get(TAG_KIND, "trial") == kind]
        token = getattr(page, "token", None)
        if not token:
            return out


def metrics_of(result: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in result.items() if k not in SKIP and not str(k).startswith(("config/", "_"))
            and isinstance(v, int | float) and not isinstance(v, bool)}


def upsert(client: Any, experiment_id: str, run_id: str, sweep_id: str, trial_id: str, checkpoint: str,
           result: Mapping[str, Any], params: Mapping[str, Any], status: str, donor: str | None = None,
           dataset: tuple[str, str] | None = None, kind: str = "trial", new: bool = False) -> Upserted:
    """The trial's model for its best ``checkpoint``: made, replaced (another checkpoint than the model holds:
    its metrics would mix two checkpoints) or brought up to date (tags, status; files and metrics only where a
    earlier attempt left them out).

    ``status``: one of :data:`STATUSES` (a failed trial's model is FAILED); ``dataset``: the (name, digest) the
    trainable declares, which its metrics are linked to; ``kind``: ``trial``, or ``confirm`` for a re-run of
    ``sweeps confirm`` (tagged ``sweeps.confirm``, never ranked); ``new``: the caller knows no model of the trial
    exists and no other writer makes one (the live sweep's tracker, on the first attempt): no searches."""
    with _writing(client, sweep_id):
        model = None if new else find(client, experiment_id, sweep_id, trial_id)
        tags = {TAG_SWEEP: sweep_id, TAG_TRIAL: trial_id, TAG_KIND: kind, TAG_STATUS: status, TAG_CKPT: checkpoint,
                TAG_STEP: str(result.get("training_iteration", "")), **({TAG_DONOR: donor} if donor else {}),
                **({TAG_CONFIRM: "true"} if kind == "confirm" else {})}
        action = "updated"
        final = "FAILED" if status == "failed" else "READY"
        if model is not None and _holds(model, tags, final):
            return Upserted(str(model.model_id), "unchanged")
        if model is not None and (model.tags or {}).get(TAG_CKPT) != checkpoint:
            client.delete_logged_model(model.model_id)
            model, action = None, "replaced"
        if model is None:
            model = client.create_logged_model(experiment_id, name=f"{sweep_id}-{trial_id}", source_run_id=run_id,
                                               tags=tags, params={str(k): str(v)[:6000] for k, v in params.items()})
            action = "made" if action == "updated" else action
            if not new and (first := _yield(client, experiment_id, sweep_id, trial_id, model)) is not None:
                return Upserted(str(first.model_id), "unchanged")
        else:
            client.set_logged_model_tags(model.model_id, tags)
        try:
            _fill(client, model, run_id, checkpoint, result, dataset, fresh=action != "updated")
        except BaseException:
            _drop(client, model.model_id)  # never left PENDING, nor half-filled for a later attempt to take as done
            raise
        if action != "updated" and not new and (first := _yield(client, experiment_id, sweep_id, trial_id,
                                                                 model)) is not None:
            return Upserted(str(first.model_id), "unchanged")
        client.finalize_logged_model(model.model_id, final)
        return Upserted(str(model.model_id), action)


def _writing(client: Any, sweep_id: str) -> Any:
    """One writer of the sweep's models at a time on this machine, for a SQLite store (a lock file beside it):
    a second ``sync`` then finds the first one's model. A server's store, written from several machines, has
    :func:`_yield`."""
    import contextlib

    uri = str(getattr(client, "tracking_uri", "") or "")
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    from filelock import FileLock

    return FileLock(f"{uri[len('sqlite:///'):]}.{sweep_id}.models.lock")


def _yield(client: Any, experiment_id: str, sweep_id: str, trial_id: str, mine: Any) -> Any:
    """The model another writer made for the same trial (a second ``sync`` at the same time, on another machine:
    MLflow has no unique key on models) that stands instead of ``mine``, after deleting ``mine``; None when
    ``mine`` stands.

    Every writer checks after it creates, and again after it fills (when any model made meanwhile is seen): a
    finished model stands, else the first made (creation time, then id), so the writers agree which, and one
    is left."""
    first = find(client, experiment_id, sweep_id, trial_id)
    if first is None or first.model_id == mine.model_id:
        return None
    log.info("trial %s: another writer (a concurrent sync) made its model %s first; %s deleted", trial_id,
             first.model_id, mine.model_id)
    _drop(client, mine.model_id)
    return first


def _holds(model: Any, tags: Mapping[str, str], final: str) -> bool:
    """The model already says all of it: its tags, its final status, metrics (a second ``sync``: no writes)."""
    have = model.tags or {}
    return all(have.get(k) == v for k, v in tags.items()) and str(model.status) == final and bool(model.metrics)


def _fill(client: Any, model: Any, run_id: str, checkpoint: str, result: Mapping[str, Any],
          dataset: tuple[str, str] | None, fresh: bool) -> None:
    """The checkpoint's files and the best step's metrics, into a new model or one an earlier attempt left
    without them."""
    from mlflow.entities import Metric

    if fresh or not client.list_logged_model_artifacts(model.model_id):
        with uris.local_copy(checkpoint) as folder:
            client.log_model_artifacts(model.model_id, folder)
    if not fresh and model.metrics:
        return
    step = int(result.get("training_iteration", 0) or 0)
    # the report's own time: the run's latest value stays its last report's, the model's is its best one's
    when = int(float(result.get("timestamp") or time.time()) * 1000)
    name, digest = dataset or (None, None)
    metrics = [Metric(k, v, when, step, model_id=model.model_id, dataset_name=name, dataset_digest=digest)
               for k, v in metrics_of(result).items()]
    for i in range(0, len(metrics), 900):
        client.log_batch(run_id, metrics=metrics[i:i + 900])


def _drop(client: Any, model_id: str) -> None:
    """Delete a model whose files or metrics could not be written (else mark it FAILED)."""
    try:
        client.delete_logged_model(model_id)
    except Exception as exc:  # the store is down: FAILED if it answers that much, else PENDING until a retry
        log.debug("could not delete model %s (%s)", model_id, exc)
        try:
            client.finalize_logged_model(model_id, "FAILED")
        except Exception as again:
            log.debug("could not mark model %s FAILED (%s)", model_id, again)


def rank(client: Any, experiment_id: str, sweep_id: str, ranked: Iterable[str], parent_run_id: str = "") -> str | None:
    """Tag each trial model among the report's first :data:`RANKED` with its place (1 = best) and take the tag
    off a model no longer among them (a sweep of thousands of trials would otherwise spend a write per model on
    places nobody reads); the parent run names the best model (``sweeps.best_model_id``). Returns the best
    model's id."""
    places = {trial_id: str(place) for place, trial_id in enumerate(ranked, 1)}
    found = models_of(client, experiment_id, sweep_id)
    for m in found:
        place, had = places.get(m.tags[TAG_TRIAL]), m.tags.get(TAG_RANK)
        if place is not None and int(place) > RANKED:
            place = None
        if place is not None and place != had:
            client.set_logged_model_tags(m.model_id, {TAG_RANK: place})
        elif place is None and had is not None:
            _untag(client, m.model_id, TAG_RANK)
    best = min((m for m in sorted(found, key=_standing) if m.tags[TAG_TRIAL] in places),
               key=lambda m: int(places[m.tags[TAG_TRIAL]]), default=None)
    if best is not None and parent_run_id:
        _again(client.set_tag, parent_run_id, "sweeps.best_model_id", best.model_id)
    return str(best.model_id) if best is not None else None


def _again(write: Any, *args: Any) -> None:
    """A write that says the same whoever makes it, tried twice: MLflow sets a run's tag by read-then-insert, so
    a second ``sync`` setting it at the same moment collides once (a duplicate key); the second try updates."""
    from mlflow.exceptions import MlflowException

    try:
        write(*args)
    except MlflowException as exc:
        log.debug("%s collided (%s); once more", getattr(write, "__name__", "a write"), exc)
        write(*args)


def _untag(client: Any, model_id: str, key: str) -> None:
    """Take a tag off a model; one a concurrent ``sync`` took off first is gone all the same."""
    from mlflow.exceptions import MlflowException

    try:
        client.delete_logged_model_tag(model_id, key)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise


def ids_for(rec: Any) -> dict[str, str]:
    """Trial id -> model id of a stored sweep (its record's store), {} when the store cannot say."""
    try:
        return ids_of(rec)
    except Exception as exc:  # an unreachable store, or one without LoggedModels: the report goes without
        log.debug("no model ids for %s (%s)", rec.sweep_id, exc)
        return {}


def ids_of(rec: Any) -> dict[str, str]:
    """:func:`ids_for`, raising when the store cannot say."""
    from sweeps.tracking.client import client

    if not rec.mlflow_experiment_id:
        return {}
    return of_sweep(client(rec.tracking_uri), rec.mlflow_experiment_id, rec.sweep_id)
