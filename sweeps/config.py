"""Typed, frozen config objects, built and validated once from the composed config.

:func:`build_spec` is the single validation pass: it collects every problem and raises one
:class:`~sweeps.errors.BadInput` naming each bad key, its value and what is allowed. Nothing after it reads
Hydra or raw dicts by string key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeps import security, space
from sweeps.errors import BadInput

MODES = ("min", "max")
PLACEMENT = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
CLUSTER_MODES = ("local", "remote")
# MLflow's rules: names of params/metrics may hold alphanumerics, _ - . space / (and : in newer versions).
MLFLOW_NAME = re.compile(r"^[A-Za-z0-9_\-. /:]{1,250}$")
SECTIONS = ("sweep", "trainable", "search_space", "searcher", "scheduler", "tracking", "cluster", "storage",
            "checkpoint", "failure", "report", "promote", "security", "schedule")


@dataclass(frozen=True)
class SweepCfg:
    name: str
    metric: str
    mode: str
    num_samples: int
    max_concurrent_trials: int
    time_budget_s: float | None
    seed: int
    points_to_evaluate: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class TrainableCfg:
    name: str
    loop: str
    builder: str | None
    metrics: tuple[str, ...]
    num_workers: int
    use_gpu: bool
    resources_per_worker: dict[str, float]
    placement_strategy: str
    checkpoint_every: int
    params: dict[str, Any]
    datasets: str | None = None  # dotted path: build_datasets(config) -> {"train": ray.data.Dataset, ...}

    @property
    def epochs(self) -> int | None:
        """The fixed epoch budget of every trial (``params.epochs``), or None when it is not an int."""
        e = self.params.get("epochs")
        return e if isinstance(e, int) and not isinstance(e, bool) else None

    @property
    def cpus_per_worker(self) -> float:
        return float(self.resources_per_worker.get("CPU", 1))

    @property
    def gpus_per_worker(self) -> float:
        return float(self.resources_per_worker.get("GPU", 1 if self.use_gpu else 0))


@dataclass(frozen=True)
class TrackingCfg:
    uri: str
    experiment: str
    log_checkpoints: bool
    flush_interval_s: float


@dataclass(frozen=True)
class ClusterCfg:
    mode: str
    address: str | None
    num_cpus: float | None
    num_gpus: float | None
    driver_cpus: float
    health_check_interval_s: float
    worker_start_timeout_s: float
    log_to_driver: bool = False
    driver_resources: dict[str, float] = field(default_factory=dict)  # e.g. {"driver_slot": 1}: pin drivers


@dataclass(frozen=True)
class FailureCfg:
    max_failures: int
    worker_max_failures: int


@dataclass(frozen=True)
class ReportCfg:
    enabled: bool
    dir: str
    top_k: int


@dataclass(frozen=True)
class PromoteCfg:
    enabled: bool
    model_name: str | None
    alias: str


@dataclass(frozen=True)
class ScheduleCfg:
    name: str | None = None
    warm_start_top_k: int = 3
    regression_tolerance: float | None = None


@dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep needs, typed. Built by :func:`build_spec`; safe to pickle into Ray."""

    sweep: SweepCfg
    trainable: TrainableCfg
    space: dict[str, dict[str, Any]]
    searcher: dict[str, Any]
    scheduler: dict[str, Any]
    tracking: TrackingCfg
    cluster: ClusterCfg
    storage_path: str
    checkpoint_num_to_keep: int
    failure: FailureCfg
    report: ReportCfg
    promote: PromoteCfg
    schedule: ScheduleCfg
    allowed_targets: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def searcher_name(self) -> str:
        return str(self.searcher.get("name", "custom"))

    @property
    def scheduler_name(self) -> str:
        return str(self.scheduler.get("name", "custom"))

    def redacted(self) -> dict[str, Any]:
        """The composed config with secret-looking values replaced: safe to log and store."""
        out: dict[str, Any] = security.redact(self.raw)
        return out

    def digest(self) -> str:
        """A hash over what must not change on resume: space, metric, mode, scheduler, searcher, trainable."""
        key = {
            "space": self.space, "metric": self.sweep.metric, "mode": self.sweep.mode,
            "scheduler": self.scheduler, "searcher": self.searcher, "trainable": self.trainable.loop,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _Reader:
    """Reads typed values out of a plain dict, collecting errors instead of raising at the first one."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.errors: list[str] = []

    def section(self, name: str) -> Mapping[str, Any]:
        node = self.cfg.get(name)
        if node is None:
            return {}
        if not isinstance(node, Mapping):
            self.errors.append(f"{name}: expected a mapping, got {node!r}")
            return {}
        return node

    def get(self, sec: str, key: str, kind: str, default: Any = ..., choices: tuple[str, ...] = ()) -> Any:
        node = self.section(sec)
        full = f"{sec}.{key}"
        if key not in node or (node[key] is None and default is ...):
            if default is ...:
                self.errors.append(f"{full}: required")
            return None if default is ... else default
        value = node[key]
        if value is None and default is None:
            return None
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "num": isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(float(value)),
            "bool": isinstance(value, bool),
            "str": isinstance(value, str) and value != "",
            "list": isinstance(value, list | tuple),
            "map": isinstance(value, Mapping),
        }[kind]
        if not ok:
            names = {"int": "an integer", "num": "a finite number", "bool": "true or false",
                     "str": "a non-empty string", "list": "a list", "map": "a mapping"}
            self.errors.append(f"{full}: must be {names[kind]}, got {value!r}")
            return None if default is ... else default
        if choices and value not in choices:
            self.errors.append(f"{full}: {value!r} is not allowed; choose one of {', '.join(choices)}")
        return value


def _validate_mlflow_name(key: str, name: str) -> list[str]:
    if MLFLOW_NAME.match(name) and ".." not in name and not name.startswith("/"):
        return []
    return [f"{key}: {name!r} is not a valid MLflow metric/param name (letters, digits, _ - . space / : ; "
            f"at most 250 characters; no '..' and no leading '/')"]


def _scheduler_errors(sched: Mapping[str, Any], trainable: Mapping[str, Any], epochs: Any,
                      space_cfg: Mapping[str, Any]) -> list[str]:
    """Scheduler-specific rules that Ray guards with asserts (gone under -O) or not at all."""
    name = str(sched.get("name", ""))
    target = str(sched.get("_target_", ""))
    errors: list[str] = []

    def num(key: str) -> float | None:
        v = sched.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            errors.append(f"scheduler.{key}: must be a number, got {v!r}")
            return None
        return float(v)

    if "time_attr" in sched and sched["time_attr"] not in ("training_iteration", "epoch", "time_total_s"):
        errors.append(f"scheduler.time_attr: {sched['time_attr']!r} is not a monotonic counter; use "
                      f"training_iteration, epoch or time_total_s")
    if target.endswith(("ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler")) or name in (
            "asha", "hyperband"):
        max_t, grace, rf = num("max_t"), num("grace_period"), num("reduction_factor")
        if max_t is not None and max_t <= 0:
            errors.append(f"scheduler.max_t: must be > 0, got {max_t:g}")
        if grace is not None and grace <= 0:
            errors.append(f"scheduler.grace_period: must be > 0, got {grace:g}")
        if grace is not None and max_t is not None and grace > max_t:
            errors.append(f"scheduler.grace_period ({grace:g}) must be <= scheduler.max_t ({max_t:g})")
        if rf is not None and rf <= 1:
            errors.append(f"scheduler.reduction_factor: must be > 1, got {rf:g}")
        if (max_t is not None and isinstance(epochs, int) and sched.get("time_attr") == "training_iteration"
                and max_t > epochs):
            errors.append(f"scheduler.max_t ({max_t:g}) exceeds trainable.params.epochs ({epochs}): trials "
                          f"end before the scheduler's budget; lower scheduler.max_t or raise the epochs")
    if target.endswith("MedianStoppingRule") or name == "median":
        grace = num("grace_period")
        if grace is not None and grace < 0:
            errors.append(f"scheduler.grace_period: must be >= 0, got {grace:g}")
    if target.endswith(("PopulationBasedTraining", "PB2")) or name in ("pbt", "pb2"):
        key = "hyperparam_bounds" if (target.endswith("PB2") or name == "pb2") else "hyperparam_mutations"
        mutations = sched.get(key) or {}
        if not mutations:
            errors.append(f"scheduler.{key}: PBT needs at least one mutation, e.g. "
                          f"scheduler.{key}.lr={{dist: loguniform, low: 1e-4, high: 1e-1}}")
        elif key == "hyperparam_bounds":
            for pname, bounds in mutations.items():
                ok = (isinstance(bounds, list | tuple) and len(bounds) == 2
                      and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
                      and bounds[0] < bounds[1])
                if not ok:
                    errors.append(f"scheduler.hyperparam_bounds.{pname}: expected [low, high] with low < high, "
                                  f"got {bounds!r}")
        elif key == "hyperparam_mutations":
            errors += space.validate_space(mutations, prefix=f"scheduler.{key}")
            unknown = sorted(set(mutations) - set(space_cfg) - set(trainable.get("params") or {}))
            if unknown:
                errors.append(f"scheduler.{key}: {', '.join(unknown)} not in the search space or trainable "
                              f"params; mutable: {', '.join(sorted(set(space_cfg)))}")
        interval, qf, rp = num("perturbation_interval"), num("quantile_fraction"), num("resample_probability")
        if interval is not None and interval <= 0:
            errors.append(f"scheduler.perturbation_interval: must be > 0, got {interval:g}")
        if qf is not None and not 0 <= qf <= 0.5:
            errors.append(f"scheduler.quantile_fraction: must be within [0, 0.5], got {qf:g}")
        if rp is not None and not 0 <= rp <= 1:
            errors.append(f"scheduler.resample_probability: must be within [0, 1], got {rp:g}")
        every = trainable.get("checkpoint_every", 1)
        if isinstance(every, int) and interval is not None and interval > 0:
            if every <= 0:
                errors.append("trainable.checkpoint_every: PBT needs checkpoints, but the trainable never "
                              "checkpoints (checkpoint_every <= 0); PBT would silently degrade to random search")
            elif every > interval or interval % every != 0:
                errors.append(f"trainable.checkpoint_every ({every}) must divide scheduler.perturbation_interval"
                              f" ({interval:g}): PBT exploits from checkpoints and would otherwise find none")
    return errors


def build_spec(cfg: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> SweepSpec:
    """Validate the composed, resolved config and freeze it into a :class:`SweepSpec`.

    Args:
        cfg: the plain dict from :func:`sweeps.compose.compose`.
        defaults: values for unset paths (``tracking_uri``, ``storage_path``), from :mod:`sweeps.paths`.

    Raises:
        BadInput: with every problem found, each naming its key.
    """
    from sweeps import paths

    r = _Reader(cfg)
    unknown = sorted(set(cfg) - set(SECTIONS) - {"hydra", "experiment"})
    if unknown:
        r.errors.append(f"unknown top-level section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")

    # sweep
    name = r.get("sweep", "name", "str")
    metric = r.get("sweep", "metric", "str")
    mode = r.get("sweep", "mode", "str", choices=MODES)
    if metric is None or mode is None:
        r.errors.append("sweep.metric/sweep.mode: the searcher and scheduler need the metric to optimize and "
                        "its mode (min or max)")
    num_samples = r.get("sweep", "num_samples", "int")
    max_conc = r.get("sweep", "max_concurrent_trials", "int", default=0)
    budget = r.get("sweep", "time_budget_s", "num", default=None)
    seed = r.get("sweep", "seed", "int", default=0)
    points = r.get("sweep", "points_to_evaluate", "list", default=[])
    if isinstance(num_samples, int):
        if num_samples == 0 or num_samples < -1:
            r.errors.append(f"sweep.num_samples: must be >= 1, or -1 (unbounded, with sweep.time_budget_s); "
                            f"got {num_samples}")
        elif num_samples == -1 and budget is None:
            r.errors.append("sweep.num_samples: -1 (unbounded) needs sweep.time_budget_s, or the sweep never "
                            "ends")
    if isinstance(max_conc, int) and max_conc < 0:
        r.errors.append(f"sweep.max_concurrent_trials: must be >= 0 (0 = as many as fit), got {max_conc}")
    if budget is not None and budget <= 0:
        r.errors.append(f"sweep.time_budget_s: must be > 0 seconds, got {budget}")
    if isinstance(name, str) and not re.match(r"^[A-Za-z0-9_.\-]{1,100}$", name):
        r.errors.append(f"sweep.name: {name!r} may only hold letters, digits, _ . - (it names folders)")
    if isinstance(metric, str):
        r.errors += _validate_mlflow_name("sweep.metric", metric)

    # trainable
    t = r.section("trainable")
    loop = r.get("trainable", "loop", "str")
    builder = r.get("trainable", "builder", "str", default=None)
    datasets = r.get("trainable", "datasets", "str", default=None)
    metrics = r.get("trainable", "metrics", "list", default=[])
    workers = r.get("trainable", "num_workers", "int")
    use_gpu = r.get("trainable", "use_gpu", "bool", default=False)
    rpw = r.get("trainable", "resources_per_worker", "map", default={}) or {}
    strategy = r.get("trainable", "placement_strategy", "str", default="PACK", choices=PLACEMENT)
    every = r.get("trainable", "checkpoint_every", "int", default=1)
    params = r.get("trainable", "params", "map", default={}) or {}
    if isinstance(params, Mapping):
        from trainables.common import knob_errors

        r.errors += [f"trainable.params.{e}" for e in knob_errors(dict(params))]
    if isinstance(workers, int) and workers < 1:
        r.errors.append(f"trainable.num_workers: must be >= 1, got {workers}")
    for res, amount in dict(rpw).items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            r.errors.append(f"trainable.resources_per_worker.{res}: must be a number >= 0, got {amount!r}")
    if use_gpu and float(dict(rpw).get("GPU", 1)) <= 0:
        r.errors.append("trainable.resources_per_worker.GPU: use_gpu=true needs GPU > 0 per worker")
    for m in metrics or []:
        r.errors += _validate_mlflow_name("trainable.metrics", str(m))
    if isinstance(metric, str) and metrics and metric not in metrics:
        r.errors.append(f"sweep.metric: {metric!r} is not reported by trainable {t.get('name')!r}; it reports "
                        f"{', '.join(map(str, metrics))}")
    for which, key in (("trainable.loop", loop), ("trainable.builder", builder), ("trainable.datasets", datasets)):
        if isinstance(key, str):
            r.errors += security.check_dotted(which, key, (cfg.get("security") or {}).get("allowed_targets", []))

    # search space
    space_cfg = cfg.get("search_space") or {}
    if not isinstance(space_cfg, Mapping):
        r.errors.append(f"search_space: expected a mapping of parameters, got {space_cfg!r}")
        space_cfg = {}
    r.errors += space.validate_space(space_cfg)
    for pname in space_cfg:
        r.errors += _validate_mlflow_name(f"search_space.{pname}", str(pname))

    # searcher / scheduler
    searcher = dict(r.section("searcher"))
    scheduler = dict(r.section("scheduler"))
    for sec, node in (("searcher", searcher), ("scheduler", scheduler)):
        if "_target_" not in node:
            r.errors.append(f"{sec}._target_: required (the Ray/Optuna/HyperOpt class to instantiate)")
    if searcher.get("name") == "grid":
        continuous = sorted(k for k, s in space_cfg.items() if isinstance(s, Mapping)
                            and s.get("dist") not in ("grid", "choice"))
        if continuous:
            r.errors.append(f"searcher=grid: parameters {', '.join(continuous)} are continuous; give them "
                            f"dist: grid or choice values, or use searcher=random|optuna|hyperopt")
    if searcher.get("name") in ("optuna", "hyperopt") and space.has_grid(space_cfg):
        r.errors.append(f"search_space: dist=grid is only for searcher=random|grid, not "
                        f"searcher={searcher.get('name')}; use dist=choice")
    r.errors += _scheduler_errors(scheduler, t, (params or {}).get("epochs"), space_cfg)

    # tracking / cluster / storage / checkpoint / failure / report / promote / schedule
    default_uri = (defaults or {}).get("tracking_uri") or paths.default_tracking_uri()
    uri = r.get("tracking", "uri", "str", default=None) or default_uri
    if not re.match(r"^(sqlite|postgresql|mysql|mssql|https?|file|databricks)(\+\w+)?:", uri):
        r.errors.append(f"tracking.uri: {uri!r} has no supported scheme; use sqlite:///path/mlflow.db, "
                        f"http://HOST:PORT (an MLflow server), or a database URI")
    cmode = r.get("cluster", "mode", "str", default="local", choices=CLUSTER_MODES)
    address = r.get("cluster", "address", "str", default=None)
    num_cpus = r.get("cluster", "num_cpus", "num", default=None)
    num_gpus = r.get("cluster", "num_gpus", "num", default=None)
    driver_cpus = r.get("cluster", "driver_cpus", "num", default=1)
    hc = r.get("cluster", "health_check_interval_s", "num", default=0.1)
    wst = r.get("cluster", "worker_start_timeout_s", "num", default=120)
    to_driver = r.get("cluster", "log_to_driver", "bool", default=False)
    driver_res = r.get("cluster", "driver_resources", "map", default={}) or {}
    for res, amount in dict(driver_res).items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            r.errors.append(f"cluster.driver_resources.{res}: must be a number >= 0, got {amount!r}")
    if isinstance(driver_cpus, int | float) and driver_cpus <= 0:
        r.errors.append(f"cluster.driver_cpus: must be > 0 (Tune rejects an empty driver), got {driver_cpus}")
    if num_cpus is not None and num_cpus <= 0:
        r.errors.append(f"cluster.num_cpus: must be > 0, got {num_cpus}")
    storage = r.get("storage", "path", "str", default=None) or (defaults or {}).get("storage_path") or str(
        paths.default_storage())
    keep = r.get("checkpoint", "num_to_keep", "int", default=2)
    if isinstance(keep, int) and keep < 1:
        r.errors.append(f"checkpoint.num_to_keep: must be >= 1, got {keep}")
    max_failures = r.get("failure", "max_failures", "int", default=1)
    worker_failures = r.get("failure", "worker_max_failures", "int", default=1)
    for key, v in (("failure.max_failures", max_failures), ("failure.worker_max_failures", worker_failures)):
        if isinstance(v, int) and v < -1:
            r.errors.append(f"{key}: must be >= -1 (-1 = retry forever), got {v}")
    rep_enabled = r.get("report", "enabled", "bool", default=True)
    rep_dir = r.get("report", "dir", "str", default="reports")
    top_k = r.get("report", "top_k", "int", default=5)
    pro_enabled = r.get("promote", "enabled", "bool", default=False)
    model_name = r.get("promote", "model_name", "str", default=None)
    alias = r.get("promote", "alias", "str", default="champion")
    if model_name is not None:
        from sweeps.naming import model_name_errors

        r.errors += model_name_errors("promote.model_name", model_name)
    sch = r.section("schedule")
    top_k_ws = r.get("schedule", "warm_start_top_k", "int", default=3)
    tolerance = r.get("schedule", "regression_tolerance", "num", default=None)
    if isinstance(top_k_ws, int) and top_k_ws < 0:
        r.errors.append(f"schedule.warm_start_top_k: must be >= 0, got {top_k_ws}")
    if tolerance is not None and tolerance < 0:
        r.errors.append(f"schedule.regression_tolerance: must be >= 0 (or null for no check), got {tolerance}")
    allowed = r.get("security", "allowed_targets", "list", default=[]) or []
    r.errors += security.check_targets(cfg, allowed)

    if r.errors:
        raise BadInput(*r.errors)
    experiment = r.get("tracking", "experiment", "str", default=None) or name
    return SweepSpec(
        sweep=SweepCfg(name, metric, mode, num_samples, max_conc, float(budget) if budget else None, seed,
                       tuple(dict(p) for p in points)),
        trainable=TrainableCfg(
            name=str(t.get("name", loop)), loop=loop, builder=builder, metrics=tuple(map(str, metrics)),
            num_workers=workers, use_gpu=use_gpu, resources_per_worker={k: float(v) for k, v in rpw.items()},
            placement_strategy=strategy, checkpoint_every=every, params=dict(params), datasets=datasets,
        ),
        space={k: dict(v) for k, v in space_cfg.items()},
        searcher=searcher,
        scheduler=scheduler,
        tracking=TrackingCfg(uri, experiment, bool(r.get("tracking", "log_checkpoints", "bool", default=True)),
                             float(r.get("tracking", "flush_interval_s", "num", default=2.0))),
        cluster=ClusterCfg(cmode, address, num_cpus, num_gpus, float(driver_cpus), float(hc), float(wst),
                           bool(to_driver), {k: float(v) for k, v in dict(driver_res).items()}),
        storage_path=storage,
        checkpoint_num_to_keep=keep,
        failure=FailureCfg(max_failures, worker_failures),
        report=ReportCfg(rep_enabled, rep_dir, top_k),
        promote=PromoteCfg(pro_enabled, model_name, alias),
        schedule=ScheduleCfg(sch.get("name"), int(top_k_ws if top_k_ws is not None else 3),
                             float(tolerance) if tolerance is not None else None),
        allowed_targets=tuple(allowed),
        raw=dict(cfg),
    )
