"""Before anything starts: compose and validate a sweep, and describe it (``--dry-run``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sweeps import store
from sweeps.config import compose, redaction, security, trust
from sweeps.config.build import build_spec
from sweeps.config.contract import check_trainable, describe
from sweeps.config.spec import SweepSpec
from sweeps.config.targets import check_arguments
from sweeps.errors import BadInput
from sweeps.execution.cluster import remote
from sweeps.execution.resources import plan
from sweeps.ops import project


def prepare(overrides: Sequence[str], space: Mapping[str, Any] | None = None) -> SweepSpec:
    """Compose and validate; raises BadInput before anything is started or written.

    ``space``: a search space to use instead of the composed ``search_space`` (the Hydra sweeper's, whose keys
    may hold dots that an override would nest)."""
    project.importable()  # the project's own trainables, for this driver and the embedded Ray's processes
    cfg = compose.compose(overrides)
    if space is not None:
        cfg["search_space"] = {k: dict(v) for k, v in space.items()}
    spec = build_spec(cfg)
    check_arguments(spec.searcher, spec.scheduler, security.prefixes(spec.allowed_targets))
    check_trainable(spec.trainable)
    return spec


def _workers(spec: SweepSpec) -> str:
    """The trainable's workers as a trial runs them."""
    if plan.in_process(spec):
        return "1 process: in the trial's own process (Train's local mode), reused for the next trial"
    return f"{plan.workers(spec)} worker(s)"


def dry_run(spec: SweepSpec, overrides: Sequence[str] = ()) -> str:
    """The composed sweep (``overrides``: what composed it, for the config files it came from), its space and
    the resource plan, as text (nothing is started)."""
    if spec.cluster.mode == "local":
        plan_text = plan.make_plan(spec, plan.local_resources(spec, dry_run=True), local=True).describe()
    else:
        plan_text = remote.describe(spec)
    lines = [
        f"sweep          : {spec.sweep.name} ({spec.sweep.metric}, {spec.sweep.mode})",
        f"trainable      : {spec.trainable.name} ({spec.trainable.loop}), {_workers(spec)}, "
        f"use_gpu={spec.trainable.use_gpu}",
        f"searcher       : {spec.searcher_name}    scheduler: {spec.scheduler_name}",
        f"tracking       : {spec.tracking.uri} (experiment {spec.tracking.experiment})",
        f"storage        : {spec.storage_path}",
        "config files   :",
        *(f"  {line}" for line in compose.sources(overrides)),
        "contract       : (read from the loop's source)",
        *(f"  {line}" for line in describe(spec.trainable)),
        f"targets allowed: {', '.join(security.ALLOWED_TARGET_PREFIXES)}",
        f"  added by security.allowed_targets and ${trust.ENV}: {', '.join(spec.allowed_targets) or '(none)'}",
        "search space   :",
        *(f"  {k}: {json.dumps(v)}" for k, v in spec.space.items()),
        "plan           :",
        *(f"  {line}" for line in plan_text.splitlines()),
        f"  resource-hours : {hours_estimate(spec)}",
    ]
    return "\n".join(lines)


def hours_estimate(spec: SweepSpec) -> str:
    """What the sweep will hold, from the last finished sweep of the same experiment (per trial x trials)."""
    from sweeps import store

    planned = plan.total_trials(spec)
    prev = store.latest_for(spec.sweep.name)
    hours, trials = (prev.hours or {}) if prev else {}, (prev.counts or {}).get("total") if prev else None
    budget = spec.sweep.budget
    limit = (f"; budget {budget.cpu_hours:g} CPU-h" if budget.cpu_hours else "") + \
            (f"; budget {budget.gpu_hours:g} GPU-h" if budget.gpu_hours else "")
    if prev is None or not trials or hours.get("cpu_used") is None:
        return ("unknown until a sweep of this experiment has run (budgets are enforced from what the trials "
                f"actually hold){limit}")
    per_cpu, per_gpu = (hours.get("cpu_used") or 0.0) / trials, (hours.get("gpu_used") or 0.0) / trials
    if planned is None:
        return f"{per_cpu:.3f} CPU-h per trial (sweep {prev.sweep_id}); unbounded trials{limit}"
    return (f"~{per_cpu * planned:.3f} CPU-h, {per_gpu * planned:.3f} GPU-h for {planned} trials at most "
            f"(sweep {prev.sweep_id}: {per_cpu:.3f} CPU-h per trial; early stopping spends less){limit}")


def spec_for(rec: store.SweepRecord, extra: list[str]) -> SweepSpec:
    # Secrets typed on the command line were stored redacted: the user gives them again (or via ${oc.env:}).
    spec = prepare(redaction.restore_overrides(rec.overrides, extra))
    if spec.digest() != rec.digest:
        raise BadInput(
            f"config: the sweep {rec.sweep_id} was started with a different search space, metric, mode, "
            f"scheduler, searcher or trainable (digest {rec.digest} != {spec.digest()}); resuming would mix "
            f"two sweeps. Undo the change, or start a new sweep with `python -m sweeps run ...`")
    if spec.storage_path != rec.storage_path:
        spec = _with_storage(spec, rec.storage_path)
    return spec


def _with_storage(spec: SweepSpec, path: str) -> SweepSpec:
    import dataclasses

    return dataclasses.replace(spec, storage_path=path)
