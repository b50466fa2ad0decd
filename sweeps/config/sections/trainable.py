"""The ``trainable`` section: the loop, its builder, loader and datasets, workers and resources, fixed params."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sweeps.config import security
from sweeps.config.reader import Reader, mlflow_name_errors
from sweeps.config.spec import TrainableCfg

PLACEMENT = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
DOTTED = ("loop", "builder", "load_model", "datasets")


def parse(r: Reader, allowed: Sequence[str]) -> TrainableCfg:
    t = r.section("trainable")
    loop = r.get("trainable", "loop", "str")
    builder = r.get("trainable", "builder", "str", default=None)
    datasets = r.get("trainable", "datasets", "str", default=None)
    load_model = r.get("trainable", "load_model", "str", default=None)
    metrics = r.get("trainable", "metrics", "list", default=[])
    workers = r.get("trainable", "num_workers", "int")
    use_gpu = r.get("trainable", "use_gpu", "bool", default=False)
    rpw = r.amounts("trainable.resources_per_worker",
                    r.get("trainable", "resources_per_worker", "map", default={}) or {})
    strategy = r.get("trainable", "placement_strategy", "str", default="PACK", choices=PLACEMENT)
    every = r.get("trainable", "checkpoint_every", "int", default=1)
    params = r.get("trainable", "params", "map", default={}) or {}
    r.errors += _param_errors(params)
    if isinstance(workers, int) and workers < 1:
        r.errors.append(f"trainable.num_workers: must be >= 1, got {workers}")
    if use_gpu and float(rpw.get("GPU", 1)) <= 0:
        r.errors.append("trainable.resources_per_worker.GPU: use_gpu=true needs GPU > 0 per worker")
    for m in metrics or []:
        r.errors += mlflow_name_errors("trainable.metrics", str(m))
    for key in DOTTED:
        value = t.get(key)
        if isinstance(value, str) and value:
            r.errors += security.check_dotted(f"trainable.{key}", value, allowed)
    return TrainableCfg(
        name=str(t.get("name", loop)), loop=loop, builder=builder, metrics=tuple(map(str, metrics or [])),
        num_workers=workers, use_gpu=use_gpu, resources_per_worker=rpw, placement_strategy=strategy,
        checkpoint_every=every, params=dict(params), datasets=datasets, load_model=load_model,
    )


def _param_errors(params: Any) -> list[str]:
    if not isinstance(params, Mapping):
        return []
    from trainables.common import knob_errors

    return [f"trainable.params.{e}" for e in knob_errors(dict(params))]


def metric_errors(metric: Any, trainable: TrainableCfg) -> list[str]:
    """The sweep metric must be one the trainable declares (when it declares any)."""
    if not isinstance(metric, str) or not trainable.metrics or metric in trainable.metrics:
        return []
    return [f"sweep.metric: {metric!r} is not reported by trainable {trainable.name!r}; it reports "
            f"{', '.join(trainable.metrics)}"]
