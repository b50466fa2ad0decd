"""Promotion: a sweep's best checkpoint -> an MLflow model in the trial's run -> a registry version + alias.

Pipeline (everything that can be refused is checked before anything is written):

1. the sweep record (``store.load``; ``latest`` works) and its trials (``results.load_records``);
2. the trial: ``--trial`` or the sweep's best (``summary.collect``); its best remaining checkpoint folder,
   verified file by file (``trainables.common.CHECKPOINT_FILES``);
3. the model, rebuilt by the trainable's own builder (``trainable.builder``) with the trainable's params plus
   the trial's, loaded with ``torch.load(weights_only=True)`` and evaluated on the trainable's
   ``validation_data()`` (accuracy for classifiers, rmse for regressors);
4. the gate: the version the alias points at must have recorded a worse value of the same metric and mode,
   unless ``force``;
5. ``mlflow.pytorch.log_model`` into the trial's run (with an input example, so MLflow infers the signature),
   ``mlflow.register_model(<logged model uri>)`` (RAY_NOTES §6: ``runs:/`` URIs fail in MLflow 3), lineage
   tags on the version, and the alias moved to it.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.errors import BadInput, GateRefused

log = logging.getLogger(__name__)

ALIAS = re.compile(r"^[A-Za-z0-9_\-]{1,255}$")
RESERVED_ALIAS = re.compile(r"^(latest|v\d+)$", re.IGNORECASE)
EXAMPLE_ROWS = 5

# Version tags: the lineage of a registered model version.
TAG_SWEEP = "sweep_id"
TAG_TRIAL = "trial_id"
TAG_METRIC = "metric"
TAG_VALUE = "metric_value"
TAG_MODE = "mode"
TAG_GIT = "git_commit"
TAG_DIGEST = "config_digest"
TAG_RUN = "run_id"
TAG_CHECKPOINT = "checkpoint"
TAG_FORCED = "forced"
EVAL_TAGS = ("accuracy", "rmse")


# -- pure rules ---------------------------------------------------------------------------------------------
def check_model_name(name: str | None, key: str = "--model-name") -> str:
    """The name, or BadInput when it is empty, path-like or has odd characters."""
    from sweeps.naming import model_name_errors

    errors = model_name_errors(key, name or "")
    if errors:
        raise BadInput(*errors)
    return str(name)


def check_alias(alias: str | None, key: str = "--alias") -> str:
    """The alias, or BadInput (MLflow aliases: letters, digits, ``_``, ``-``; not ``latest`` nor ``v<N>``)."""
    if not alias or not ALIAS.match(alias):
        raise BadInput(f"{key}: {alias!r} is not a valid alias; use letters, digits, _ or - (e.g. champion)")
    if RESERVED_ALIAS.match(alias):
        raise BadInput(f"{key}: {alias!r} is reserved by MLflow (latest, v1, v2...); choose another, e.g. "
                       f"champion")
    return alias


def is_better(new: float, old: float, mode: str) -> bool:
    """True when ``new`` is strictly better than ``old`` under ``mode`` (NaN is never better)."""
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be min or max, got {mode!r}")
    if not math.isfinite(new):
        return False
    if not math.isfinite(old):
        return True
    return new > old if mode == "max" else new < old


@dataclass(frozen=True)
class Champion:
    """What the alias points at now, as recorded in that version's tags."""

    version: str
    metric: str | None
    mode: str | None
    value: float | None

    @classmethod
    def from_tags(cls, version: str, tags: Mapping[str, str]) -> Champion:
        return cls(version=str(version), metric=tags.get(TAG_METRIC), mode=tags.get(TAG_MODE),
                   value=_float(tags.get(TAG_VALUE)))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def gate(champion: Champion | None, *, name: str, alias: str, metric: str, mode: str, value: float,
         force: bool = False) -> str | None:
    """Decide whether a candidate may take the alias.

    Returns a note on what it replaces (None when the alias is free). Raises GateRefused when the champion is
    better or equal, or when the champion's record cannot be compared (another metric or mode, no value),
    unless ``force``.
    """
    if champion is None:
        return None
    where = f"{name}@{alias} (version {champion.version})"
    if champion.metric != metric or champion.mode != mode or champion.value is None:
        note = (f"{where} recorded {champion.metric or '?'} = {champion.value} ({champion.mode or '?'}), "
                f"which cannot be compared with {metric} ({mode})")
        if force:
            return f"replaced {note} (forced)"
        raise GateRefused(f"promote: {note}; nothing registered. Pass --force to promote anyway, or use "
                          f"another --model-name/--alias")
    summary = f"{where} has {metric} = {champion.value:.6g}"
    if is_better(value, champion.value, mode):
        return f"replaced {summary}"
    if force:
        return f"replaced {summary} (forced; candidate {value:.6g} is not better)"
    raise GateRefused(f"promote: {summary} ({mode}), at least as good as the candidate's {value:.6g}; "
                      f"nothing registered. Pass --force to promote anyway")


def score(outputs: Any, labels: Any) -> dict[str, float]:
    """Accuracy (argmax) for a classifier's logits and integer labels, else rmse. numpy arrays in."""
    import numpy as np

    out, y = np.asarray(outputs), np.asarray(labels)
    # (N, C) logits vs (N,) labels, or per-position (N, T, V) logits vs (N, T) token ids (a language model)
    if out.ndim == y.ndim + 1 and out.shape[-1] > 1 and np.issubdtype(y.dtype, np.integer):
        return {"accuracy": float((out.argmax(axis=-1) == y).mean())}
    err = out.reshape(len(y)).astype(np.float64) - y.astype(np.float64)
    return {"rmse": float(np.sqrt(np.mean(err ** 2)))}


# -- checks against the sweep's files -----------------------------------------------------------------------
def verify_checkpoint(path: str | None, trial_id: str) -> str:
    """The checkpoint folder, or BadInput when it is missing or incomplete (nothing is loaded yet)."""
    from trainables.common import CHECKPOINT_FILES

    if not path:
        raise BadInput(f"checkpoint: trial {trial_id} has no checkpoint left on disk; promote another trial "
                       f"(--trial) or rerun the sweep")
    folder = Path(path)
    if not folder.is_dir():
        raise BadInput(f"checkpoint: {folder} (trial {trial_id}) is missing")
    bad = [f for f in CHECKPOINT_FILES if not (folder / f).is_file() or (folder / f).stat().st_size == 0]
    if bad:
        raise BadInput(f"checkpoint: {folder} (trial {trial_id}) is incomplete: missing or empty "
                       f"{', '.join(bad)}; expected {', '.join(CHECKPOINT_FILES)}")
    return str(folder)


def pick_trial(records: Sequence[Any], metric: str, mode: str, sweep_id: str, trial_id: str | None) -> Any:
    """The trial to promote: ``trial_id``, else the sweep's best. BadInput if unknown or unsuccessful."""
    from sweeps.summary import collect, rank, to_row

    if trial_id is not None:
        found = [r for r in records if r.trial_id == trial_id]
        if not found:
            known = ", ".join(r.trial_id for r in records) or "(none)"
            raise BadInput(f"--trial: no trial {trial_id!r} in sweep {sweep_id}; trials: {known}")
        if not rank([to_row(found[0], metric, mode)], mode):
            raise BadInput(f"--trial: trial {trial_id} did not succeed (status {found[0].status}, no finite "
                           f"{metric}); pick a successful trial")
        return found[0]
    best = collect(list(records), metric, mode).best
    if best is None:
        raise BadInput(f"SWEEP_ID: sweep {sweep_id} has no successful trial (none reported a finite "
                       f"{metric}); nothing to promote")
    return next(r for r in records if r.trial_id == best.trial_id)


def trial_value(trial: Any, checkpoint: str, metric: str, mode: str) -> float:
    """The sweep metric of the promoted checkpoint (its meta.json), else the trial's best value."""
    import json

    from sweeps.summary import best_value

    try:
        v = json.loads((Path(checkpoint) / "meta.json").read_text()).get(metric)
    except ValueError:
        v = None
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return best_value(trial.values(metric), mode)


def _builder(rec: Any) -> tuple[str, dict[str, Any]]:
    """The trainable's dotted builder path and fixed params from the sweep's composed config."""
    from sweeps import security

    t = (rec.config or {}).get("trainable") or {}
    builder = t.get("builder")
    if not isinstance(builder, str) or not builder:
        raise BadInput(f"trainable.builder: sweep {rec.sweep_id}'s trainable {t.get('name')!r} declares no "
                       f"builder (build_model(config) -> nn.Module); promote needs one")
    allowed = ((rec.config or {}).get("security") or {}).get("allowed_targets") or []
    errors = security.check_dotted("trainable.builder", builder, allowed)
    if errors:
        raise BadInput(*errors)
    return builder, dict(t.get("params") or {})


def rebuild(rec: Any, trial: Any, checkpoint: str) -> tuple[Any, Any, Any]:
    """(model in eval mode, x_val, y_val): the trainable's builder + the checkpoint's weights + its data."""
    from sweeps.trial import import_dotted
    from trainables.common import load_checkpoint

    builder, params = _builder(rec)
    module = builder.replace(":", ".").rpartition(".")[0]
    try:
        build = import_dotted(builder)
        validation_data = import_dotted(f"{module}.validation_data")
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"trainable.builder: cannot import {builder!r} and {module}.validation_data() "
                       f"({exc}); a trainable exposes both for promotion") from None
    config = {**params, **trial.params}
    model = build(config)
    try:
        state, _, _ = load_checkpoint(checkpoint)
        model.load_state_dict(state)
    except Exception as exc:  # truncated file, foreign pickle (weights_only refuses it), shape mismatch
        raise BadInput(f"checkpoint: {checkpoint} cannot be loaded into {builder}'s model ({exc})") from None
    model.eval()
    import inspect

    # validation_data(config) when the trainable takes its settings (e.g. a data path), else validation_data()
    x_val, y_val = validation_data(config) if inspect.signature(validation_data).parameters else validation_data()
    return model, x_val, y_val


def evaluate(model: Any, x: Any, y: Any) -> dict[str, float]:
    import torch

    with torch.no_grad():
        out = model(x)
    return score(out.numpy(), y.numpy())


# -- MLflow -------------------------------------------------------------------------------------------------
@contextmanager
def mlflow_uris(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API (tracking and registry) at ``uri``; restore both afterwards."""
    import mlflow

    from sweeps.tracking import configure_client_env

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
    from sweeps import tracking

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise BadInput(f"tracking.uri: no MLflow store at {uri[len('sqlite:///'):]}")
    tracking.probe(uri)


def find_trial_run(c: Any, rec: Any, trial_id: str) -> Any:
    """The trial's MLflow run (child of the sweep's parent run)."""
    from sweeps import tracking

    if not rec.parent_run_id or not rec.mlflow_experiment_id:
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} has no MLflow parent run; back-fill it with "
                       f"`python -m sweeps sync {rec.sweep_id}`")
    runs = tracking.find_runs(c, [rec.mlflow_experiment_id],
                              f"tags.`{tracking.TAG_TRIAL}` = '{trial_id}' and "
                              f"tags.`{tracking.PARENT_TAG}` = '{rec.parent_run_id}'")
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


def _requirements() -> list[str]:
    """Pinned runtime requirements (MLflow's inference loads the model in a subprocess: slow on 2 cores)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("torch", "numpy", "cloudpickle"):
        try:
            out.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            out.append(pkg)
    return out


@dataclass(frozen=True)
class Promotion:
    """A registered version; ``str()`` is the line the CLI prints."""

    model_name: str
    version: str
    alias: str
    sweep_id: str
    trial_id: str
    metric: str
    mode: str
    value: float
    evaluation: dict[str, float]
    model_uri: str
    replaced: str | None = None

    def __str__(self) -> str:
        evals = ", ".join(f"{k} {v:.4f}" for k, v in self.evaluation.items())
        text = (f"registered {self.model_name} version {self.version} as @{self.alias}: trial "
                f"{self.trial_id} of {self.sweep_id}, {self.metric} = {self.value:.4f} ({self.mode}); "
                f"{evals} on the validation data")
        if self.replaced:
            text += f"; {self.replaced}"
        return text + f". Load it with mlflow.pyfunc.load_model('models:/{self.model_name}@{self.alias}')"


@dataclass(frozen=True)
class _Candidate:
    rec: Any
    trial: Any
    checkpoint: str
    value: float


def _candidate(sweep_id: str, trial_id: str | None) -> _Candidate:
    from sweeps import store
    from sweeps.results import load_records

    rec = store.load(sweep_id)
    records = load_records(rec.experiment_dirs, rec.metric, rec.mode, settled=rec.status == "finished")
    trial = pick_trial(records, rec.metric, rec.mode, rec.sweep_id, trial_id)
    checkpoint = verify_checkpoint(trial.best_checkpoint, trial.trial_id)
    return _Candidate(rec, trial, checkpoint, trial_value(trial, checkpoint, rec.metric, rec.mode))


def promote(sweep_id: str, *, model_name: str | None = None, alias: str = "champion",
            trial_id: str | None = None, force: bool = False) -> Promotion:
    """Register a sweep's best (or named) trial's checkpoint as a new version of ``model_name`` at ``alias``.

    Args:
        sweep_id: a sweep id or ``latest``.
        model_name: registry name; default: the sweep's experiment name.
        alias: the alias to move to the new version (the gate compares against its current version).
        trial_id: promote this trial instead of the sweep's best.
        force: skip the gate.

    Raises:
        BadInput: bad name/alias, unknown sweep or trial, no successful trial, missing/incomplete checkpoint.
        GateRefused: the alias's current version recorded a better or equal value.

    Example:
        ``promote("latest", model_name="digits-mlp")`` then
        ``mlflow.pyfunc.load_model("models:/digits-mlp@champion")``.
    """
    if model_name is not None:
        check_model_name(model_name)
    alias = check_alias(alias)
    cand = _candidate(sweep_id, trial_id)
    rec, trial = cand.rec, cand.trial
    name = check_model_name(model_name or rec.experiment, "--model-name (default: the experiment name)")
    check_store(rec.tracking_uri)
    model, x_val, y_val = rebuild(rec, trial, cand.checkpoint)
    evaluation = evaluate(model, x_val, y_val)

    from sweeps import tracking

    c = tracking.client(rec.tracking_uri)
    run = find_trial_run(c, rec, trial.trial_id)
    replaced = gate(current_champion(c, name, alias), name=name, alias=alias, metric=rec.metric,
                    mode=rec.mode, value=cand.value, force=force)
    git = c.get_run(rec.parent_run_id).data.tags.get("git_commit", "unknown")
    tags = {TAG_SWEEP: rec.sweep_id, TAG_TRIAL: trial.trial_id, TAG_METRIC: rec.metric,
            TAG_VALUE: repr(cand.value), TAG_MODE: rec.mode, TAG_GIT: git, TAG_DIGEST: rec.digest,
            TAG_RUN: run.info.run_id, TAG_CHECKPOINT: cand.checkpoint,
            **{k: repr(v) for k, v in evaluation.items()}}
    if force and replaced:
        tags[TAG_FORCED] = "true"
    version, uri = _register(rec, run.info.run_id, model, x_val, name, tags)
    c.set_registered_model_alias(name, alias, version)
    log.info("registered %s version %s (%s) as @%s", name, version, uri, alias)
    return Promotion(model_name=name, version=version, alias=alias, sweep_id=rec.sweep_id,
                     trial_id=trial.trial_id, metric=rec.metric, mode=rec.mode, value=cand.value,
                     evaluation=evaluation, model_uri=uri, replaced=replaced)


def _register(rec: Any, run_id: str, model: Any, x_val: Any, name: str, tags: dict[str, str]
              ) -> tuple[str, str]:
    """Log the PyTorch model in the trial's run (status untouched) and register it; (version, model uri)."""
    import mlflow
    import mlflow.pytorch

    example = x_val[:EXAMPLE_ROWS].numpy()
    with mlflow_uris(rec.tracking_uri):
        mlflow.set_experiment(experiment_id=rec.mlflow_experiment_id)
        # run_id (passed through to Model.log) attaches the model to the finished trial run without
        # reopening it: start_run() would flip a KILLED/FINISHED run to RUNNING and then FINISHED.
        info = mlflow.pytorch.log_model(model, name="model", input_example=example,
                                        pip_requirements=_requirements(), run_id=run_id,
                                        tags={TAG_SWEEP: rec.sweep_id, TAG_TRIAL: tags[TAG_TRIAL]})
        mv = mlflow.register_model(info.model_uri, name, tags=tags)
    return str(mv.version), str(info.model_uri)


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
        out.extend(page)
        token = page.token
        if not token:
            return out


def _row(mv: Any, aliases: Sequence[str]) -> dict[str, str]:
    tags = dict(mv.tags or {})
    value = _float(tags.get(TAG_VALUE))
    metric = "-"
    if value is not None:
        metric = f"{tags.get(TAG_METRIC, '?')}={value:.4f} ({tags.get(TAG_MODE, '?')})"
    evals = [f"{k}={float(tags[k]):.4f}" for k in EVAL_TAGS if _float(tags.get(k)) is not None]
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime((mv.creation_timestamp or 0) / 1000))
    return {"name": mv.name, "version": str(mv.version), "aliases": ",".join(sorted(aliases)) or "-",
            "metric": metric, "eval": " ".join(evals) or "-", "sweep": tags.get(TAG_SWEEP, "-"),
            "trial": tags.get(TAG_TRIAL, "-"), "created": created}


def format_table(rows: Sequence[Mapping[str, str]]) -> str:
    """A plain fixed-width table; the header comes from the first row's keys."""
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in cols}
    lines = ["  ".join(k.ljust(widths[k]) for k in cols).rstrip()]
    lines += ["  ".join(str(r[k]).ljust(widths[k]) for k in cols).rstrip() for r in rows]
    return "\n".join(lines)


def list_models(uri: str, name: str | None = None) -> list[dict[str, str]]:
    """Rows for ``models``; BadInput for an unknown ``name`` (lists the registered names)."""
    from sweeps import tracking

    if uri.startswith("sqlite:///") and not os.path.isfile(uri[len("sqlite:///"):]):
        if name:
            raise BadInput(f"NAME: no registered model {name!r}: there is no MLflow store at "
                           f"{uri[len('sqlite:///'):]} yet")
        return []
    tracking.probe(uri, key="--tracking-uri")
    c = tracking.client(uri)
    if name is not None:
        names = sorted(m.name for m in _registered(c))
        if name not in names:
            raise BadInput(f"NAME: no registered model {name!r} in {uri}; registered: "
                           f"{', '.join(names) or '(none)'}")
    return version_rows(c, name)


# -- CLI ----------------------------------------------------------------------------------------------------
def cli_promote(args: argparse.Namespace) -> int:
    """``python -m sweeps promote SWEEP_ID|latest [--model-name N] [--alias A] [--trial T] [--force]``."""
    result = promote(args.sweep_id, model_name=args.model_name, alias=args.alias, trial_id=args.trial,
                     force=bool(args.force))
    print(result)  # noqa: T201 - CLI output
    return 0


def cli_models(args: argparse.Namespace) -> int:
    """``python -m sweeps models [NAME] [--tracking-uri URI]``: registered versions as a table."""
    from sweeps import paths

    uri = args.tracking_uri or paths.default_tracking_uri()
    if args.name is not None:
        check_model_name(args.name, "NAME")
    rows = list_models(uri, args.name)
    if not rows:
        print(f"no registered models in {uri}; promote a sweep with `python -m sweeps promote latest`")  # noqa: T201
        return 0
    print(format_table(rows))  # noqa: T201 - CLI output
    return 0
