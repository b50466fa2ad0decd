"""The ``trainable`` section: the loop, its builder, loader and datasets, workers and resources, fixed params."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sweeps.config import security
from sweeps.config.reader import Reader, mlflow_name_errors
from sweeps.config.sections import script as script_section
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
    requires = tuple(map(str, r.get("trainable", "requires", "list", default=[]) or []))
    extra = r.get("trainable", "extra", "str", default=None)
    dataset = _dataset(r, r.get("trainable", "dataset", "map", default=None))
    script = script_section.parse(r, t.get("script"))
    in_process = _in_process(r, t.get("in_process", "auto"), workers, bool(script))
    pack = r.get("trainable", "pack", "int", default=1)
    packing = pack_errors(pack, workers, use_gpu, rpw)
    r.errors += packing
    if not packing and use_gpu and isinstance(pack, int) and pack > 1:
        rpw = {**rpw, "GPU": 1.0 / pack}  # each worker's share of its GPU, as Ray schedules it
    r.errors += _param_errors(params) + requirement_errors(str(t.get("name", loop)), requires, extra)
    if isinstance(workers, int) and workers < 0:
        r.errors.append(f"trainable.num_workers: must be >= 0 (0: the loop runs in the trial's own process), "
                        f"got {workers}")
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
        requires=requires, extra=extra, dataset=dataset, script=script, in_process=in_process,
        pack=pack if isinstance(pack, int) and pack >= 1 else 1,
    )


def pack_errors(pack: Any, workers: Any, use_gpu: Any, rpw: Mapping[str, float]) -> list[str]:
    """``trainable.pack: K``: K single-worker trials share one GPU (each worker asks ``GPU: 1/K`` and keeps
    ``1/K`` of the device's memory); refused where that cannot hold."""
    if not isinstance(pack, int) or pack == 1:
        return []
    if pack < 1:
        return [f"trainable.pack: must be an integer >= 1 (1: one trial per GPU; K: K single-worker trials share "
                f"a GPU), got {pack}"]
    errors = []
    if isinstance(workers, int) and workers > 1:
        errors.append(f"trainable.pack: {pack} is refused for multi-worker trials (trainable.num_workers is "
                      f"{workers}): the workers of one data-parallel trial would share a GPU and NCCL needs a "
                      f"device per rank; set trainable.num_workers=1 or trainable.pack=1")
    if not use_gpu:
        errors.append(f"trainable.pack: {pack} packs trials onto GPUs, but trainable.use_gpu is false; set "
                      f"trainable.use_gpu=true or trainable.pack=1")
    gpu = rpw.get("GPU")
    if use_gpu and gpu is not None and not math.isclose(float(gpu), 1.0 / pack, rel_tol=1e-3):
        errors.append(f"trainable.pack: {pack} gives each worker GPU={1.0 / pack:g}, but "
                      f"trainable.resources_per_worker.GPU is set to {gpu:g}; remove resources_per_worker.GPU "
                      f"(pack sets it) or set trainable.pack=1")
    return errors


IN_PROCESS = ("auto", "true", "false")


def pack_params(t: TrainableCfg) -> dict[str, Any]:
    """What a packed sweep records (its MLflow parent run's params): trials per GPU and each one's share of the
    GPU's memory; nothing when trials are not packed."""
    if t.pack <= 1 or not t.use_gpu:
        return {}
    return {"pack": t.pack, "gpu_memory_fraction": round(1.0 / t.pack, 4)}


def _in_process(r: Reader, value: Any, workers: Any, script: bool) -> bool | None:
    """``trainable.in_process``: ``auto`` (None: a 1-worker CPU trial runs in its trial's process), true or
    false; refused where it cannot hold."""
    told = {"auto": None, True: True, False: False, "true": True, "false": False}.get(value, ...)
    if told is ...:
        r.errors.append(f"trainable.in_process: {value!r} is not allowed; choose one of {', '.join(IN_PROCESS)}")
        return None
    if told is True and isinstance(workers, int) and workers > 1:
        r.errors.append(f"trainable.in_process: true needs a single-process trial, but trainable.num_workers is "
                        f"{workers}; set num_workers=1 or in_process=auto (a multi-worker trial keeps its worker "
                        "group)")
    if told is False and workers == 0:
        r.errors.append("trainable.in_process: false with trainable.num_workers=0; num_workers=0 means the loop "
                        "runs in the trial's own process: set num_workers=1 for a worker group of one")
    if script and (told is True or workers == 0):
        r.errors.append("trainable.in_process: a script trainable runs its script in a Train worker (the launcher's "
                        "environment); set in_process=auto and num_workers >= 1")
    return told


def _dataset(r: Reader, node: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """``trainable.dataset: {name: ..., digest: ...}``: the data the trainable trains on, as MLflow names a
    dataset (the models' metrics are linked to it); both keys, short strings."""
    if node is None:
        return None
    name, digest = node.get("name"), node.get("digest")
    bad = sorted(set(node) - {"name", "digest"})
    if bad or not all(isinstance(v, str) and 0 < len(v) <= 500 for v in (name, digest)):
        r.errors.append(f"trainable.dataset: got {dict(node)!r}; give both name and digest as non-empty strings "
                        "(e.g. {name: sklearn-digits, digest: f6d9e39f})")
        return None
    return str(name), str(digest)


def requirement_errors(name: str, requires: Sequence[str], extra: str | None) -> list[str]:
    """The modules a trainable needs that this environment lacks, with the install that brings them."""
    import importlib.util

    missing = []
    for module in requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(module)
    if not missing:
        return []
    how = f"pip install 'sweeps[{extra}]'" if extra else f"pip install {' '.join(missing)}"
    return [f"trainable: {name!r} needs {', '.join(missing)}, which this environment lacks; install them with "
            f"{how}"]


def _param_errors(params: Any) -> list[str]:
    if not isinstance(params, Mapping):
        return []
    return [f"trainable.params.{e}" for e in knob_errors(params)]


def knob_errors(params: Mapping[str, Any]) -> list[str]:
    """The shared training knobs the bundled trainables honour (``lr``, ``scale_lr``, ``grad_accum_steps``,
    ``torch_threads``), checked before Ray starts.

    The same rules as ``trainables.common.knob_errors`` (which each loop runs again on its worker), written out
    here because the config layer does not import the bundled examples; a test holds the two to one table.
    """
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    errors: list[str] = []
    lr = params.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr)
                           or lr <= 0):
        errors.append(f"lr: must be a finite number > 0, got {lr!r}")
    scale = params.get("scale_lr", False)
    if not isinstance(scale, bool):
        errors.append(f"scale_lr: must be true or false, got {scale!r}")
    accum = params.get("grad_accum_steps", 1)
    if not is_int(accum) or accum < 1:
        errors.append(f"grad_accum_steps: must be an integer >= 1, got {accum!r}")
    threads = params.get("torch_threads")
    if threads is not None and (not is_int(threads) or threads < 0):
        errors.append(f"torch_threads: must be an integer >= 1 (or 0/unset: the worker's CPUs), got {threads!r}")
    return errors


def metric_errors(metric: Any, trainable: TrainableCfg) -> list[str]:
    """The sweep metric must be one the trainable declares (when it declares any)."""
    if not isinstance(metric, str) or not trainable.metrics or metric in trainable.metrics:
        return []
    return [f"sweep.metric: {metric!r} is not reported by trainable {trainable.name!r}; it reports "
            f"{', '.join(trainable.metrics)}"]
