"""The sweep's parent MLflow run: opened with its tags, params and config, finished with counts and the best."""

from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeps import paths
from sweeps.config import compose, redaction
from sweeps.config.sections.trainable import pack_params
from sweeps.config.spec import SweepSpec
from sweeps.lease import driver_id
from sweeps.store import SweepRecord
from sweeps.tracking import client as mc

RUN_TAG_BEST = "sweeps.best"  # on the one trial run that is the sweep's best
RUN_TAG_PARETO = "sweeps.pareto"  # multi-objective: on the trial runs of the (feasible) Pareto front
RUN_TAG_ALLOWED = "sweeps.allowed_targets"  # packages added to the `_target_` allowlist by security.allowed_targets
RUN_TAG_LISTENERS = "sweeps.listeners"  # where the sweep's processes listen (execution.loopback.listeners)


def _git() -> dict[str, str]:
    """The commit of the project the sweep ran from: the cwd's repo, else the one holding the sweeps package."""
    for folder in (Path.cwd(), paths.PACKAGE_ROOT):
        try:
            sha = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5)
            if sha.returncode != 0:
                continue
            dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain"], capture_output=True,
                                   text=True, timeout=5)
            return {"git_commit": sha.stdout.strip(), "git_dirty": str(bool(dirty.stdout.strip())).lower()}
        except (OSError, subprocess.SubprocessError):
            continue
    return {"git_commit": "unknown", "git_dirty": "unknown"}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python_version": platform.python_version()}
    for pkg in ("ray", "torch", "mlflow", "optuna", "hyperopt"):
        try:
            out[f"{pkg}_version"] = version(pkg)
        except PackageNotFoundError:
            out[f"{pkg}_version"] = "missing"
    return out


def open_parent(spec: SweepSpec, sweep_id: str, overrides: Sequence[str], schedule: str | None,
                previous: str | None, listeners: str = "") -> tuple[Any, str, str]:
    """Create the sweep's MLflow experiment and parent run; returns (client, experiment_id, run_id).

    ``listeners``: where the sweep's processes listen, tagged ``sweeps.listeners`` when given."""
    c = mc.client(spec.tracking.uri)
    exp_id = mc.get_or_create_experiment(c, spec.tracking.experiment, spec.tracking.uri)
    tags = {
        mc.RUN_TAG_SWEEP: sweep_id, mc.RUN_TAG_KIND: "sweep", mc.RUN_TAG_DRIVER: driver_id(),
        "experiment": spec.sweep.name, "searcher": spec.searcher_name, "scheduler": spec.scheduler_name,
        "metric": spec.sweep.metric, "mode": spec.sweep.mode, "trainable": spec.trainable.name,
        "config_digest": spec.digest(), **_git(), **_versions(),
        RUN_TAG_ALLOWED: ",".join(spec.allowed_targets) or "(none)",
    }
    if listeners:
        tags[RUN_TAG_LISTENERS] = listeners
    if schedule:
        tags["schedule"] = schedule
    if previous:
        tags["previous_sweep_id"] = previous
    run = c.create_run(exp_id, run_name=sweep_id, tags=redaction.redact(tags))
    run_id = run.info.run_id
    try:
        mc.log_params(c, run_id, {"overrides": " ".join(redaction.redact_overrides(overrides)) or "(none)",
                                  "num_samples": spec.sweep.num_samples, "seed": spec.sweep.seed,
                                  **pack_params(spec.trainable)})
        mc.write_text_artifact(c, run_id, "config.yaml", compose.to_yaml(spec.redacted()))
        mc.write_json_artifact(c, run_id, "search_space.json", redaction.redact(spec.space))
    except BaseException:
        c.set_terminated(run_id, status="FAILED")  # never leave a half-opened parent run RUNNING
        raise
    return c, exp_id, run_id


def finish_parent(c: Any, rec: SweepRecord, status: str, mlflow_seconds: float,
                  loop_seconds: float | None = None) -> None:
    """End the parent run with the record's counts, wall time and best trial (also tagged ``sweeps.best``)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    tags: dict[str, Any] = {f"count.{k}": v for k, v in rec.counts.items()}
    if rec.stop_reason:
        tags["stop_reason"] = rec.stop_reason
    for key, value in (rec.hours or {}).items():
        if value is not None:
            tags[f"hours.{key}"] = f"{value:.4f}"
    metrics = [Metric("sweeps/mlflow_seconds", mlflow_seconds, now, 0)]
    if loop_seconds is not None:  # of them, the calls that held Tune's loop (not the model uploads' thread)
        metrics.append(Metric("sweeps/mlflow_loop_seconds", loop_seconds, now, 0))
    if rec.wall_s is not None:
        metrics.append(Metric("sweeps/wall_s", rec.wall_s, now, 0))
    best = rec.best or {}
    if best.get("trial_id"):
        tags.update({"best_trial_id": best["trial_id"], "best_metric": best["value"],
                     "best_config": best["params"]})
        metrics.append(Metric(f"best/{rec.metric}", float(best["value"]), now, 0))
        best_run = mc.find_runs(c, [rec.mlflow_experiment_id],
                                f"tags.`{mc.RUN_TAG_TRIAL}` = '{best['trial_id']}' and "
                                f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}'")
        if best_run:
            tags["best_run_id"] = best_run[0].info.run_id
            tags["best_checkpoint"] = best_run[0].data.tags.get("best_checkpoint", "")
            mark_best(c, rec, best_run[0].info.run_id)
    if rec.pareto:
        tag_front(c, rec)
    mc.set_tags(c, rec.parent_run_id, tags)
    c.log_batch(rec.parent_run_id, metrics=metrics)
    c.set_terminated(rec.parent_run_id, status=status)


def tag_front(c: Any, rec: SweepRecord) -> None:
    """Multi-objective: ``sweeps.pareto=true`` and ``sweeps.pareto_rank`` on the trial runs, so the MLflow UI
    can filter the front (``tags.`sweeps.pareto` = 'true'``)."""
    runs = mc.find_runs(c, [rec.mlflow_experiment_id], f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}'")
    by_trial = {r.data.tags.get(mc.RUN_TAG_TRIAL): r.info.run_id for r in runs}
    for p in rec.pareto:
        run_id = by_trial.get(p["trial_id"])
        if run_id is None:
            continue
        on_front = p["rank"] == 1 and p["feasible"]
        mc.set_tags(c, run_id, {RUN_TAG_PARETO: str(on_front).lower(), "sweeps.pareto_rank": p["rank"],
                                "sweeps.feasible": str(p["feasible"]).lower()})


def mark_best(c: Any, rec: SweepRecord, run_id: str) -> None:
    """Tag ``run_id`` ``sweeps.best=true`` and take the tag off any other run of the sweep (resume, extend)."""
    previous = mc.find_runs(c, [rec.mlflow_experiment_id], f"tags.`{mc.PARENT_TAG}` = '{rec.parent_run_id}' and "
                                                          f"tags.`{RUN_TAG_BEST}` = 'true'")
    for run in previous:
        if run.info.run_id != run_id:
            c.delete_tag(run.info.run_id, RUN_TAG_BEST)
    c.set_tag(run_id, RUN_TAG_BEST, "true")


def make_tracker(spec: SweepSpec, rec: SweepRecord, confirm: bool = False) -> Any:
    """The Tune callback that writes this sweep's trial runs under its parent run."""
    from sweeps.tracking.queued import make_callback

    secrets: set[str] = redaction.known()
    redaction.redact(spec.raw, secrets)
    return make_callback(
        uri=spec.tracking.uri, experiment_id=rec.mlflow_experiment_id, parent_run_id=rec.parent_run_id,
        sweep_id=rec.sweep_id, metric=spec.sweep.metric, mode=spec.sweep.mode,
        fixed_params=spec.trainable.params, flush_interval_s=spec.tracking.flush_interval_s,
        log_checkpoints=spec.tracking.log_checkpoints, max_models=spec.tracking.max_models,
        epochs=spec.trainable.epochs,
        secrets=secrets, confirm=confirm, storage_path=spec.storage_path, dataset=spec.trainable.dataset,
    )
