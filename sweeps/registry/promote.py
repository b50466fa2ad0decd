"""Promotion: a sweep's best checkpoint -> a servable MLflow model in the trial's run -> a registry version + alias.

Pipeline (everything that can be refused is checked before anything is written):

1. the sweep record (``store.load``; ``latest`` works) and its trials (``results.load_records``);
2. the trial: ``--trial`` or the sweep's best (``summary.collect``), and its best remaining checkpoint folder;
3. the model, from the trainable's own loader (``trainable.load_model(checkpoint_dir, config)``, which alone
   knows the checkpoint's layout) with the trainable's params plus the trial's;
4. the package (``package.py``): the servable module exported with ``torch.export``, the preprocessing data
   it needs, a signature and input example of raw rows, pinned requirements; saved locally, loaded back with
   ``mlflow.pyfunc.load_model`` and scored on the trainable's raw ``validation_data()`` in the task's terms
   (accuracy, rmse in the target's units, perplexity);
5. under the registry lock for ``NAME@ALIAS`` (``lock.py``: one promotion at a time, whoever runs it): the gate
   (the version the alias points at must have recorded a worse value of the same metric and mode, unless
   ``force``), the package logged into the trial's run, ``mlflow.register_model(<logged model uri>)``
   (``runs:/`` URIs fail in MLflow 3: docs/mlflow.md), lineage tags on the version, and the alias moved to it.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.config import stored
from sweeps.errors import BadInput
from sweeps.registry import choice, registry
from sweeps.registry.gate import (
    VERSION_TAG_CHECKPOINT,
    VERSION_TAG_DIGEST,
    VERSION_TAG_FORCED,
    VERSION_TAG_GIT,
    VERSION_TAG_METRIC,
    VERSION_TAG_MODE,
    VERSION_TAG_RUN,
    VERSION_TAG_SWEEP,
    VERSION_TAG_TASK,
    VERSION_TAG_TRIAL,
    VERSION_TAG_VALUE,
    check_alias,
    check_model_name,
    gate,
)
from sweeps.registry.model import load, verify_checkpoint

log = logging.getLogger(__name__)

PAUSE_ENV = "SWEEPS_TEST_PROMOTE_PAUSE_S"  # seconds to wait between the gate and the alias move (tests only)


def pick_trial(records: Sequence[Any], metric: str, mode: str, sweep_id: str, trial_id: str | None) -> Any:
    """The trial to promote: ``trial_id``, else the sweep's best. BadInput if unknown or unsuccessful."""
    from sweeps.reports.summary import collect, rank, to_row

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
    """The sweep metric Tune recorded with the promoted checkpoint, else the trial's best value."""
    from sweeps.reports.summary import best_value

    v = trial.best_checkpoint_value if checkpoint == trial.best_checkpoint else None
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return best_value(trial.values(metric), mode)


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
        return text + (f". Load it with mlflow.pyfunc.load_model('models:/{self.model_name}@{self.alias}'): raw "
                       f"inputs in, answers in the task's terms out")


@dataclass(frozen=True)
class _Candidate:
    rec: Any
    trial: Any
    checkpoint: str
    value: float
    choice: choice.Choice


def _candidate(sweep_id: str, trial_id: str | None, rule: str | None, confirmed: bool) -> _Candidate:
    """The trial (``--trial``; the confirmed winner; a front trial by rule; the best), its checkpoint, value."""
    from sweeps import store
    from sweeps.reports.results import load_records

    rec = store.load(sweep_id)
    records = load_records(rec.experiment_dirs, rec.metric, rec.mode, settled=rec.status == "finished")
    sweep = stored.of(rec)
    confirmed = confirmed or sweep.promote.require_confirmed
    if confirmed and trial_id is not None:
        raise BadInput("--trial: not with --confirmed (or promote.require_confirmed): the confirmed winner is "
                       "promoted; drop one of them")
    picked: choice.Choice | None = None
    if confirmed:
        records = load_records(rec.confirm_dirs, rec.metric, rec.mode, settled=True) if rec.confirm_dirs else []
        picked = choice.confirmed_choice(rec, records)
    elif trial_id is None:
        picked = choice.front_choice(rec, records, choice.rule_of(sweep, rule))
    elif rule is not None:
        raise BadInput("--rule: not with --trial (the rule picks the trial); drop one of them")
    trial = pick_trial(records, rec.metric, rec.mode, rec.sweep_id, picked.trial_id if picked else trial_id)
    picked = picked or choice.Choice(trial.trial_id, "trial" if trial_id else "best")
    checkpoint = verify_checkpoint(trial.best_checkpoint, trial.trial_id)
    value = picked.value if picked.value is not None else trial_value(trial, checkpoint, rec.metric, rec.mode)
    return _Candidate(rec, trial, checkpoint, value, picked)


def promote(sweep_id: str, *, model_name: str | None = None, alias: str = "champion",
            trial_id: str | None = None, force: bool = False, rule: str | None = None,
            confirmed: bool = False) -> Promotion:
    """Register a sweep's best (or named) trial's checkpoint as a new version of ``model_name`` at ``alias``.

    Args:
        sweep_id: a sweep id or ``latest``.
        model_name: registry name; default: the sweep's experiment name.
        alias: the alias to move to the new version (the gate compares against its current version).
        trial_id: promote this trial instead of the sweep's best.
        force: skip the gate.
        rule: multi-objective sweeps: which front trial (``best_primary``, ``cheapest_within:PCT``); default
            the sweep's ``promote.rule``.
        confirmed: promote ``sweeps confirm``'s winner, gated on its pessimistic bound (also when the sweep set
            ``promote.require_confirmed``).

    Raises:
        BadInput: bad name/alias, unknown sweep or trial, no successful trial, a checkpoint the trainable's
            loader cannot read, a model that cannot be packaged.
        GateRefused: the alias's current version recorded a better or equal value (or another promotion of
            the same alias held the lock for too long).

    Example:
        ``promote("latest", model_name="digits-mlp")`` then
        ``mlflow.pyfunc.load_model("models:/digits-mlp@champion").predict(raw_rows)``.
    """
    if model_name is not None:
        check_model_name(model_name)
    alias = check_alias(alias)
    if rule is not None:
        _check_rule(rule)
    cand = _candidate(sweep_id, trial_id, rule, confirmed)
    rec, trial = cand.rec, cand.trial
    name = check_model_name(model_name or rec.experiment, "--model-name (default: the experiment name)")
    registry.check_store(rec.tracking_uri)
    _gate(cand, name, alias, force)  # a plain refusal costs no packaging and writes nothing; re-run under the lock
    obj, x_val, y_val, key = load(rec, trial, cand.checkpoint)
    with tempfile.TemporaryDirectory(prefix="sweeps-package-") as tmp:
        servable, kwargs, evaluation = _package(obj, x_val, y_val, key, Path(tmp))
        return _register(cand, name, alias, force, servable.task, kwargs, evaluation, Path(tmp) / "model")


def _package(obj: Any, x_val: Any, y_val: Any, key: str, folder: Path) -> tuple[Any, dict[str, Any],
                                                                               dict[str, float]]:
    """(servable, log_model's arguments, scores of the saved package loaded back on the validation data)."""
    import mlflow.pyfunc

    from sweeps.registry import package

    servable = package.servable(obj, x_val, y_val, key)
    kwargs = package.save_local(servable, x_val, folder, key)
    mlflow.pyfunc.save_model(path=str(folder / "model"), **kwargs)
    served = mlflow.pyfunc.load_model(str(folder / "model"))
    return servable, kwargs, package.evaluate(servable, served, x_val, y_val)


def _gate(cand: _Candidate, name: str, alias: str, force: bool, c: Any = None) -> str | None:
    """The gate against the version ``name@alias`` points at now (GateRefused, or what it replaces)."""
    from sweeps.tracking import client as mc

    c = c if c is not None else mc.client(cand.rec.tracking_uri)
    return gate(registry.current_champion(c, name, alias), name=name, alias=alias, metric=cand.rec.metric,
                mode=cand.rec.mode, value=cand.value, force=force, rule=cand.choice.rule,
                second=cand.choice.second)


def _check_rule(rule: str) -> None:
    from sweeps.config.sections.objectives import RULE

    if not RULE.match(rule):
        raise BadInput(f"--rule: {rule!r} is not a rule; use best_primary or cheapest_within:PCT (e.g. "
                       f"cheapest_within:0.5)")


def _register(cand: _Candidate, name: str, alias: str, force: bool, task: str, kwargs: dict[str, Any],
              evaluation: dict[str, float], saved: Path | None = None) -> Promotion:
    """Under the lock: gate on the current champion, log + register the package, move the alias."""
    from sweeps.registry import lock
    from sweeps.tracking import client as mc

    rec, trial = cand.rec, cand.trial
    c = mc.client(rec.tracking_uri)
    run = registry.find_trial_run(c, rec, trial.trial_id)
    git = c.get_run(rec.parent_run_id).data.tags.get("git_commit", "unknown")
    with lock.holding(c, name, alias) as held:
        replaced = _gate(cand, name, alias, force, c)  # authoritative: nobody else can move the alias now
        time.sleep(float(os.environ.get(PAUSE_ENV, 0) or 0))  # tests: hold the gate open so promotions overlap
        tags = {VERSION_TAG_SWEEP: rec.sweep_id, VERSION_TAG_TRIAL: trial.trial_id, VERSION_TAG_METRIC: rec.metric,
                VERSION_TAG_VALUE: repr(cand.value), VERSION_TAG_MODE: rec.mode, VERSION_TAG_GIT: git,
                VERSION_TAG_DIGEST: rec.digest, VERSION_TAG_RUN: run.info.run_id,
                VERSION_TAG_CHECKPOINT: cand.checkpoint, VERSION_TAG_TASK: task,
                **{k: repr(v) for k, v in evaluation.items()}, **cand.choice.tags}
        if force and replaced:
            tags[VERSION_TAG_FORCED] = "true"
        version, uri = registry.register(rec, run.info.run_id, kwargs, name, tags, saved)
        held.check()  # still ours: nobody else moved the alias since the gate read it
        c.set_registered_model_alias(name, alias, version)
    log.info("registered %s version %s (%s) as @%s", name, version, uri, alias)
    return Promotion(model_name=name, version=version, alias=alias, sweep_id=rec.sweep_id,
                     trial_id=trial.trial_id, metric=rec.metric, mode=rec.mode, value=cand.value,
                     evaluation=evaluation, model_uri=uri, replaced=replaced)
