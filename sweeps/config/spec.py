"""The typed, frozen config objects of a sweep (built once by :func:`sweeps.config.build.build_spec`).

Nothing after validation reads Hydra or raw dicts by string key: the pipeline reads these attributes, and what
a later command reads of a stored sweep's config, :mod:`sweeps.config.stored` reads into typed values once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from sweeps.config import redaction


@dataclass(frozen=True)
class Objective:
    metric: str
    mode: str  # min | max


@dataclass(frozen=True)
class Constraint:
    """An outcome constraint such as ``model/latency_ms <= 2.0``."""

    metric: str
    op: str  # <= < >= >
    bound: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


@dataclass(frozen=True)
class BudgetCfg:
    """Resource-hours a sweep may spend, accounted from what its trials hold (None: no limit)."""

    cpu_hours: float | None = None
    gpu_hours: float | None = None

    @property
    def enabled(self) -> bool:
        return self.cpu_hours is not None or self.gpu_hours is not None


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
    budget: BudgetCfg = field(default_factory=BudgetCfg)
    objectives: tuple[Objective, ...] = ()  # multi-objective: the primary (metric, mode) first; () = single
    constraints: tuple[Constraint, ...] = ()
    stall_timeout_s: float | None = None  # None: derived from what the sweep has seen; 0: never

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1


PACK_KEY = "_sweeps_pack"  # the loop config's key of trainable.pack (the worker caps its GPU memory to 1/pack)


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
    load_model: str | None = None  # dotted path: load_model(checkpoint_dir, config) -> ServableModel | nn.Module
    requires: tuple[str, ...] = ()  # modules the loop imports beyond sweeps' own dependencies
    extra: str | None = None  # the package extra that installs them (pip install 'sweeps[EXTRA]')
    dataset: tuple[str, str] | None = None  # (name, digest) of the data it trains on: the models' metrics name it
    script: dict[str, Any] | None = None  # the script adapter's ScriptSpec fields (sweeps.config.sections.script)
    in_process: bool | None = None  # None: auto (sweeps.execution.resources.plan.in_process decides)
    pack: int = 1  # single-worker trials per GPU: each worker asks GPU 1/pack and keeps 1/pack of its memory

    def loop_extras(self, metric: str) -> dict[str, Any]:
        """What the loop and the loader get beside the params: a script trainable's spec, with the metric it
        must log; a packed trial's ``pack`` (its worker caps its GPU memory, :mod:`sweeps.execution.train.bridge`)."""
        packed = {PACK_KEY: self.pack} if self.pack > 1 and self.use_gpu else {}
        if not self.script:
            return packed
        from sweeps.config.sections.script import SPEC_KEY

        return {SPEC_KEY: {**self.script, "metric": metric}, **packed}

    @property
    def epochs(self) -> int | None:
        """The fixed epoch budget of every trial (``params.epochs``, or the script's epoch option), or None when
        it is not an int."""
        key = (self.script or {}).get("epochs") or "epochs"
        e = self.params.get(key)
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
    max_models: int = 100  # a LoggedModel for each trial among the sweep's best N when it ended (0: every trial)


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
    node_types: tuple[dict[str, float], ...] = ()  # what an autoscaler can add (refuse what none can hold)
    wait_for_resources_s: float = 600.0  # a remote sweep waits this long for nodes that can hold a trial
    ship_code: bool = True  # remote: send sweeps, trainables and the trainable's package to the nodes
    head_memory_per_trial_mb: float = 600.0  # remote: what Train's per-run cleaner holds on the head (0: ignore)


@dataclass(frozen=True)
class FailureCfg:
    max_failures: int
    worker_max_failures: int
    max_preemption_failures: int = -1  # Train's FailureConfig default: recover from every node preemption
    preemption_grace_s: float = 0.0  # how long survivors may run past a preemption deadline (Train's default)


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
    require_confirmed: bool = False  # promote only a confirmed winner, gated on its pessimistic bound
    rule: str = "best_primary"  # multi-objective: which front trial (best_primary | cheapest_within:PCT)


@dataclass(frozen=True)
class NotifyCfg:
    """Where to POST sweep events (the URL is a secret: it is redacted wherever the config is written)."""

    webhook_url: str | None = None
    on: tuple[str, ...] = ("failed", "regressed", "promoted", "finished")
    timeout_s: float = 2.0


@dataclass(frozen=True)
class ConfirmCfg:
    """Re-run the top-k configurations with fresh seeds at the end of a sweep."""

    enabled: bool = False
    top_k: int = 3
    seeds: int = 5


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
    notify: NotifyCfg = field(default_factory=NotifyCfg)
    confirm: ConfirmCfg = field(default_factory=ConfirmCfg)

    @property
    def searcher_name(self) -> str:
        return str(self.searcher.get("name", "custom"))

    @property
    def scheduler_name(self) -> str:
        return str(self.scheduler.get("name", "custom"))

    def redacted(self) -> dict[str, Any]:
        """The composed config with secret-looking values replaced: safe to log and store."""
        out: dict[str, Any] = redaction.redact(self.raw)
        return out

    def digest(self) -> str:
        """A hash over what must not change on resume: space, metric, mode, scheduler, searcher, trainable."""
        key = {
            "space": self.space, "metric": self.sweep.metric, "mode": self.sweep.mode,
            "scheduler": self.scheduler, "searcher": self.searcher, "trainable": self.trainable.loop,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
