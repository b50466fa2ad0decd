"""Registry reads and writes: the champion an alias points at, logging and registering a model, listing."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sweeps.errors import BadInput
from sweeps.registry.gate import (
    EVAL_TAGS,
    VERSION_TAG_METRIC,
    VERSION_TAG_MODE,
    VERSION_TAG_SWEEP,
    VERSION_TAG_TRIAL,
    VERSION_TAG_VALUE,
    Champion,
    _float,
)
from sweeps.registry.lock import is_lock
from sweeps.tracking import client as mc


# -- MLflow -------------------------------------------------------------------------------------------------
@contextmanager
def mlflow_uris(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API (tracking and registry) at ``uri``; restore both afterwards."""
    import mlflow

    from sweeps.tracking.client import configure_client_env

    configure_client_env(uri)
    before = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before[0])
        mlflow.set_registry_uri(before[1])


def check_store(uri: str) -> None:
    """A SQLite store must exist (never create an empty one as a side effect); a server must answer."""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise BadInput(f"tracking.uri: no MLflow store at {uri[len('sqlite:///'):]}")
    mc.probe(uri)


def find_trial_run(c: Any, rec: Any, trial_id: str) -> Any:
    """The trial's MLflow run (child of the sweep's parent run)."""
    if not rec.parent_run_id or not rec.mlflow_experiment_id:
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} has no MLflow parent run; back-fill it with "
                       f"`python -m sweeps sync {rec.sweep_id}`")
    runs = mc.find_runs(c, [rec.mlflow_experiment_id],
                              f"tags.`{mc.RUN_TAG_TRIAL}` = '{trial_id}' and "
                              f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}'")
    if not runs:
        raise BadInput(f"trial {trial_id} of sweep {rec.sweep_id} has no MLflow run in {rec.tracking_uri}; "
                       f"back-fill it with `python -m sweeps sync {rec.sweep_id}`")
    return runs[0]


def current_champion(c: Any, name: str, alias: str) -> Champion | None:
    """The version ``name@alias`` points at, or None (no such model, or the alias is free)."""
    from mlflow.exceptions import MlflowException

    try:
        version = c.get_registered_model(name).aliases.get(alias)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    if version is None:
        return None
    mv = c.get_model_version(name, str(version))
    return Champion.from_tags(mv.version, mv.tags)


def register(rec: Any, run_id: str, package: dict[str, Any], name: str, tags: dict[str, str],
             saved: Path | None = None) -> tuple[str, str]:
    """Log the model package in the trial's run (status untouched) as a LoggedModel whose lineage names the
    trial's own model, and register it from ``models:/<its id>``; (version, model uri). A store without
    LoggedModels (a server of MLflow 2) gets the package ``saved`` locally as the run's ``model/`` artifacts,
    registered from there."""
    import mlflow
    import mlflow.pyfunc
    from mlflow.models import Model

    from sweeps.tracking import models

    c = mc.client(rec.tracking_uri)
    trial_id = tags[VERSION_TAG_TRIAL]
    if not models.supported(c, rec.tracking_uri):
        return _register_files(c, rec, run_id, saved, name, tags)
    try:
        source = models.find(c, rec.mlflow_experiment_id, rec.sweep_id, trial_id)
    except Exception as exc:
        if not models.missing_api(exc):
            raise
        models.degrade(rec.tracking_uri, exc)
        return _register_files(c, rec, run_id, saved, name, tags)
    lineage = {models.TAG_KIND: "served", VERSION_TAG_SWEEP: rec.sweep_id, VERSION_TAG_TRIAL: trial_id,
               **({models.TAG_SOURCE: source.model_id} if source is not None else {})}
    with mlflow_uris(rec.tracking_uri):
        mlflow.set_experiment(experiment_id=rec.mlflow_experiment_id)
        # Model.log(run_id=...) attaches the model to the finished trial run without reopening it: start_run()
        # would flip a KILLED/FINISHED run to RUNNING and then FINISHED. (mlflow.pyfunc.log_model takes no
        # run_id; it calls Model.log with flavor=mlflow.pyfunc.)
        info = Model.log(artifact_path=None, name=f"{rec.sweep_id}-{trial_id}-served", flavor=mlflow.pyfunc,
                         run_id=run_id, tags=lineage, **package)
        model_uri = f"models:/{info.model_id}" if getattr(info, "model_id", None) else str(info.model_uri)
        version_tags = {**tags, "sweeps.model_id": str(getattr(info, "model_id", "") or ""),
                        **({models.TAG_SOURCE: source.model_id} if source is not None else {})}
        mv = mlflow.register_model(model_uri, name, tags=version_tags)
    return str(mv.version), model_uri


def _register_files(c: Any, rec: Any, run_id: str, saved: Path | None, name: str, tags: dict[str, str]
                    ) -> tuple[str, str]:
    """A store without LoggedModels: the saved package as the run's ``model/`` artifacts, a version from there."""
    from mlflow.exceptions import MlflowException

    if saved is None:
        raise BadInput(f"tracking.uri: {rec.tracking_uri} holds no LoggedModels and no saved package was given")
    c.log_artifacts(run_id, str(saved), artifact_path="model")
    try:
        c.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{c.get_run(run_id).info.artifact_uri.rstrip('/')}/model"
    mv = c.create_model_version(name, source=source, run_id=run_id, tags=tags)
    return str(mv.version), f"runs:/{run_id}/model"


# -- listing ------------------------------------------------------------------------------------------------
def version_rows(c: Any, name: str | None) -> list[dict[str, str]]:
    """Registered versions (all models, or one) as table rows, by name then version."""
    names = [name] if name else sorted(m.name for m in _registered(c))
    rows = []
    for n in names:
        aliases: dict[str, list[str]] = {}
        for alias, version in c.get_registered_model(n).aliases.items():
            aliases.setdefault(str(version), []).append(alias)
        for mv in c.search_model_versions(f"name = '{n}'"):
            rows.append(_row(mv, aliases.get(str(mv.version), [])))
    return sorted(rows, key=lambda r: (r["name"], int(r["version"])))


def _registered(c: Any) -> list[Any]:
    out: list[Any] = []
    token = None
    while True:
        page = c.search_registered_models(max_results=1000, page_token=token)
        out.extend(m for m in page if not is_lock(m.name))  # a promotion in progress, not a model
        token = page.token
        if not token:
            return out


def _row(mv: Any, aliases: Sequence[str]) -> dict[str, str]:
    tags = dict(mv.tags or {})
    value = _float(tags.get(VERSION_TAG_VALUE))
    metric = "-"
    if value is not None:
        metric = f"{tags.get(VERSION_TAG_METRIC, '?')}={value:.4f} ({tags.get(VERSION_TAG_MODE, '?')})"
    evals = [f"{k}={float(tags[k]):.4f}" for k in EVAL_TAGS if _float(tags.get(k)) is not None]
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((mv.creation_timestamp or 0) / 1000))
    return {"name": mv.name, "version": str(mv.version), "aliases": ",".join(sorted(aliases)) or "-",
            "metric": metric, "eval": " ".join(evals) or "-", "sweep": tags.get(VERSION_TAG_SWEEP, "-"),
            "trial": tags.get(VERSION_TAG_TRIAL, "-"), "model": tags.get("sweeps.model_id") or "-",
            "source_model": tags.get("sweeps.source_model_id") or "-", "created": created}


def list_models(uri: str, name: str | None = None) -> list[dict[str, str]]:
    """Rows for ``models``; BadInput for an unknown ``name`` (lists the registered names)."""
    if uri.startswith("sqlite:///") and not os.path.isfile(uri[len("sqlite:///"):]):
        if name:
            raise BadInput(f"NAME: no registered model {name!r}: there is no MLflow store at "
                           f"{uri[len('sqlite:///'):]} yet")
        return []
    mc.probe(uri, key="--tracking-uri")
    c = mc.client(uri)
    if name is not None:
        names = sorted(m.name for m in _registered(c))
        if name not in names:
            raise BadInput(f"NAME: no registered model {name!r} in {uri}; registered: "
                           f"{', '.join(names) or '(none)'}")
    return version_rows(c, name)
