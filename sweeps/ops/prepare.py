"""Before anything starts: compose and validate a sweep, and describe it (``--dry-run``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sweeps.config import compose
from sweeps.config.build import build_spec
from sweeps.config.contract import check_trainable, describe
from sweeps.config.spec import SweepSpec
from sweeps.config.targets import check_arguments
from sweeps.execution import plan


def prepare(overrides: Sequence[str]) -> SweepSpec:
    """Compose and validate; raises BadInput before anything is started or written."""
    spec = build_spec(compose.compose(overrides))
    check_arguments(spec.searcher, spec.scheduler)
    check_trainable(spec.trainable)
    return spec


def dry_run(spec: SweepSpec) -> str:
    """The composed sweep, its space and the resource plan, as text (nothing is started)."""
    if spec.cluster.mode == "local":
        plan_text = plan.make_plan(spec, plan.local_resources(spec), local=True).describe()
    else:
        plan_text = (f"per trial      : {plan.per_trial(spec)}\n(remote cluster: concurrency is sized from "
                     f"its resources at launch)")
    lines = [
        f"sweep          : {spec.sweep.name} ({spec.sweep.metric}, {spec.sweep.mode})",
        f"trainable      : {spec.trainable.name} ({spec.trainable.loop}), {spec.trainable.num_workers} "
        f"worker(s), use_gpu={spec.trainable.use_gpu}",
        f"searcher       : {spec.searcher_name}    scheduler: {spec.scheduler_name}",
        f"tracking       : {spec.tracking.uri} (experiment {spec.tracking.experiment})",
        f"storage        : {spec.storage_path}",
        "contract       : (read from the loop's source)",
        *(f"  {line}" for line in describe(spec.trainable)),
        "search space   :",
        *(f"  {k}: {json.dumps(v)}" for k, v in spec.space.items()),
        "plan           :",
        *(f"  {line}" for line in plan_text.splitlines()),
    ]
    return "\n".join(lines)
