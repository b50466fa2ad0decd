"""MLflow client helpers: the store's URI (probe, artifact root), the tags sweeps writes, batched writes,
paged searches, and closing runs whose driver is gone.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sweeps.config import redaction
from sweeps.errors import BadInput
from sweeps.lease import Holder, alive

log = logging.getLogger(__name__)

# Run tags: on the MLflow runs sweeps writes (the parent run and its trial runs). A registered model version
# has its own tags (sweeps.registry.gate.VERSION_TAG_*), under other names.
RUN_TAG_SWEEP = "sweeps.sweep_id"
RUN_TAG_TRIAL = "sweeps.trial_id"
RUN_TAG_KIND = "sweeps.kind"  # "sweep" or "trial"
RUN_TAG_DRIVER = "sweeps.driver"  # the process that owns the open run: host:pid token=.. proc=.. (sweeps.lease)
RUN_TAG_DIGEST = "sweeps.config_digest"  # on a trial run: its configuration (seed aside), for grouping in the UI
RUN_TAG_CONFIRM = "sweeps.confirm"  # on a trial run of `sweeps confirm`
RUN_TAG_LEASE = "sweeps.lease_expires"  # on a parent run: unix time until which its driver's claim holds
PARENT_TAG = "mlflow.parentRunId"
# MLflow 3's UI opens an experiment by its kind: this one lands on the runs table (none: the GenAI overview).
KIND_TAG, TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"
SKIP_RESULT_KEYS = {
    "timestamp", "pid", "done", "training_iteration", "iterations_since_restore", "time_since_restore",
    "date", "hostname", "node_ip", "trial_id", "experiment_tag", "checkpoint_dir_name", "should_checkpoint",
}
MAX_PARAMS, MAX_METRICS, MAX_TAGS = 100, 1000, 100
TERMINAL = ("FINISHED", "FAILED", "KILLED")


def connect_uri(uri: str) -> str:
    """The URI to hand MLflow for a stored (public) one.

    An MLflow server's credentials never ride in the URI (MLflow would print it in run links): a
    ``user:password@`` given in ``tracking.uri`` becomes ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` for this
    process. A database URI gets its password back from this process's memory (or ``$MLFLOW_TRACKING_URI``).
    """
    real = redaction.real_uri(uri)
    if not real.startswith(("http://", "https://")):
        return real
    clean, user, password = redaction.split_userinfo(real)
    if user:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return clean


def configure_client_env(uri: str) -> None:
    """Short HTTP timeouts: MLflow's own client retries an unreachable server for minutes."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def probe(uri: str, timeout_s: float = 5.0, key: str = "tracking.uri") -> None:
    """Fail fast (seconds) on a malformed or unreachable tracking URI.

    Raises:
        BadInput: naming ``tracking.uri`` and what went wrong.
    """
    uri = connect_uri(uri)
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https"):
        import urllib.error as urlerror
        import urllib.request as urlrequest

        if not parsed.hostname:
            raise BadInput(f"{key}: {uri!r} has no host; use http://HOST:PORT")
        url = uri.rstrip("/") + "/health"
        try:
            with urlrequest.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (scheme checked)
                if resp.status >= 500:
                    raise BadInput(f"{key}: the MLflow server at {uri} answered {resp.status}")
        except BadInput:
            raise
        except urlerror.HTTPError as exc:
            if exc.code >= 500:
                raise BadInput(f"{key}: the MLflow server at {uri} answered {exc.code}") from None
            if exc.code in (401, 403):
                raise BadInput(f"{key}: {uri} refused the request ({exc.code}); set MLFLOW_TRACKING_USERNAME/"
                               f"MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN") from None
            # another 4xx: something answers; MLflow's first call will say more
        except Exception as exc:
            raise BadInput(f"{key}: no MLflow server answers at {uri} within {timeout_s:g}s ({exc}); "
                           f"start one (`mlflow server --host 127.0.0.1 --port PORT`) or drop {key} "
                           f"to use the embedded SQLite store") from None
        from sweeps.tracking.versions import check_server_version

        check_server_version(uri, timeout_s, key)
    elif parsed.scheme == "sqlite":
        path = uri[len("sqlite:///"):]
        folder = Path(path).parent if path else None
        if folder is not None and folder.exists() and not os.access(folder, os.W_OK):
            raise BadInput(f"{key}: cannot write the SQLite store's folder {folder}")


def artifact_root(uri: str) -> str | None:
    """For a local SQLite store, artifacts go beside the database (not into ./mlruns)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
    return None


def client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    uri = connect_uri(uri)
    configure_client_env(uri)
    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri, registry_uri=uri)
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    if str(db) in _opened:
        return MlflowClient(tracking_uri=uri, registry_uri=uri)
    from filelock import FileLock

    # Two sweeps started at once in a fresh project would both create the store's tables, and the second dies in
    # MLflow's schema migration: the first to take the lock creates them (the client and both of its stores,
    # tracking and registry, are made under it), the other then finds them.
    with FileLock(str(db) + ".lock"):
        c = MlflowClient(tracking_uri=uri, registry_uri=uri)
        c.search_experiments(max_results=1)
        c.search_registered_models(max_results=1)
    _opened.add(str(db))
    return c


_opened: set[str] = set()  # SQLite stores this process opened (their tables made, or found) under the lock


def get_or_create_experiment(c: Any, name: str, uri: str) -> str:
    """The experiment's id; one sweeps creates is of the training kind, and so becomes one it created earlier
    without a kind. A kind someone else set is kept."""
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        if KIND_TAG not in (exp.tags or {}) and _holds_a_sweep(c, exp.experiment_id):
            c.set_experiment_tag(exp.experiment_id, KIND_TAG, TRAINING_KIND)
        return str(exp.experiment_id)
    root = artifact_root(uri)
    return str(c.create_experiment(name, artifact_location=f"{root}/{name}" if root else None,
                                   tags={KIND_TAG: TRAINING_KIND}))


def _holds_a_sweep(c: Any, exp_id: str) -> bool:
    from mlflow.entities import ViewType

    return bool(c.search_runs([exp_id], filter_string=f"tags.`{RUN_TAG_KIND}` = 'sweep'", max_results=1,
                              run_view_type=ViewType.ALL))


def chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> ``{"a.b": "value"}`` with values as MLflow param strings (max 6000 chars)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat_params(v, key + "."))
        else:
            out[key] = str(v)[:6000]
    return out


def param_items(params: Mapping[str, Any]) -> list[Any]:
    """A run's params as MLflow ``Param`` entities (flattened, redacted)."""
    from mlflow.entities import Param

    return [Param(k, v) for k, v in flat_params(redaction.redact(params)).items()]


def tag_items(tags: Mapping[str, Any]) -> list[Any]:
    """A run's tags as MLflow ``RunTag`` entities (redacted, each value at most 5,000 characters)."""
    from mlflow.entities import RunTag

    return [RunTag(k, str(v)[:5000]) for k, v in redaction.redact(dict(tags)).items()]


def log_params(c: Any, run_id: str, params: Mapping[str, Any]) -> None:
    for chunk in chunks(param_items(params), MAX_PARAMS):
        c.log_batch(run_id, params=chunk)


def set_tags(c: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    for chunk in chunks(tag_items(tags), MAX_TAGS):
        c.log_batch(run_id, tags=chunk)


def send_batches(c: Any, run_id: str, params: list[Any], metrics: list[Any], tags: list[Any]) -> None:
    """Everything given, in as few ``log_batch`` calls as MLflow's limits allow (100 params, 100 tags and 1,000
    entities a call). Each list loses what was sent, so after a failure only what is left is sent again."""
    while params or metrics or tags:
        p, t = params[:MAX_PARAMS], tags[:MAX_TAGS]
        m = metrics[:MAX_METRICS - len(p) - len(t)]
        c.log_batch(run_id, metrics=m, params=p, tags=t)
        del params[:len(p)], metrics[:len(m)], tags[:len(t)]


def find_runs(c: Any, experiment_ids: list[str], filter_string: str, max_results: int = 5000) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = c.search_runs(experiment_ids, filter_string=filter_string, max_results=min(max_results, 1000),
                             page_token=token)
        runs.extend(page)
        token = page.token
        if not token or len(runs) >= max_results:
            return runs


def close_stale_runs(c: Any, reason: str = "driver died") -> int:
    """Mark KILLED every sweeps run left RUNNING by a driver that is gone, from any host.

    The driver's lease (the parent run's ``sweeps.lease_expires`` tag) must have expired, unless the driver
    provably ran in this pid namespace and its process is gone (:func:`sweeps.lease.alive`); this process's
    own runs (its token) are never closed. Called by ``run``, ``resume``, ``sync`` and ``report``,
    so a SIGKILLed driver or a lost pod never leaves runs RUNNING.
    """
    from mlflow.entities import ViewType

    exps = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]
    if not exps:
        return 0
    runs = find_runs(c, exps, f"attributes.status = 'RUNNING' and tags.`{RUN_TAG_SWEEP}` != ''")
    parents = {r.info.run_id: r for r in runs if r.data.tags.get(RUN_TAG_KIND) == "sweep"}
    closed = 0
    for run in runs:
        driver = Holder.parse(run.data.tags.get(RUN_TAG_DRIVER, ""))
        if not driver.host or driver.mine() or _driver_alive(c, run, driver, parents):
            continue
        c.set_tag(run.info.run_id, "sweeps.closed_reason", reason)
        c.set_terminated(run.info.run_id, status="KILLED")
        closed += 1
    if closed:
        log.warning("closed %d MLflow run(s) left RUNNING by a dead driver (marked KILLED)", closed)
    return closed


def _driver_alive(c: Any, run: Any, driver: Holder, parents: dict[str, Any]) -> bool:
    parent_id = run.info.run_id if run.data.tags.get(RUN_TAG_KIND) == "sweep" else run.data.tags.get(PARENT_TAG, "")
    parent = parents.get(parent_id)
    if parent is None and parent_id:
        try:
            parent = c.get_run(parent_id)
        except Exception:  # a deleted parent: judge by the run's own tags
            parent = None
    tag = (parent.data.tags if parent is not None else run.data.tags).get(RUN_TAG_LEASE)
    expires = float(tag) if tag and tag.replace(".", "", 1).isdigit() else None
    return alive(driver, expires)


def write_json_artifact(c: Any, run_id: str, name: str, data: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
        c.log_artifact(run_id, path)


def write_text_artifact(c: Any, run_id: str, name: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        Path(path).write_text(text)
        c.log_artifact(run_id, path)


class CallTimer:
    """Adds up the seconds spent in MLflow calls (reported as ``sweeps/mlflow_seconds``), and apart the seconds of
    those that held Tune's loop (``sweeps/mlflow_loop_seconds``: every call but those of the tracker's writer
    thread and the model uploads' thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.loop_seconds = 0.0
        self._lock = threading.Lock()  # the model uploads' thread counts its calls too (sweeps.tracking.uploads)
        self._t = threading.local()

    def __getstate__(self) -> dict[str, float]:
        return {"seconds": self.seconds, "loop_seconds": self.loop_seconds}

    def __setstate__(self, state: dict[str, float]) -> None:
        self.__init__()  # type: ignore[misc]
        self.seconds = state.get("seconds", 0.0)
        self.loop_seconds = state.get("loop_seconds", 0.0)

    def __enter__(self) -> CallTimer:
        self._t.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        from sweeps.tracking import uploads, writer

        took = time.perf_counter() - self._t.start
        with self._lock:
            self.seconds += took
            if threading.current_thread().name not in (uploads.THREAD, writer.THREAD):
                self.loop_seconds += took
