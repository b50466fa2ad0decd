"""A stored sweep's config read back, typed: what reports, compare, confirm, promote and the schedule read of it.

The sweep index keeps each sweep's composed config, redacted, as a plain dict
(:attr:`sweeps.store.SweepRecord.config`). The later stages never read that dict by string key: :func:`of`
(or :func:`read`, for the config alone) reads it once, with the validator's own section parsers, into a frozen
:class:`StoredSweep`. A record written by an older version may lack keys: they read as the validator's
defaults. Nothing is refused here: the config was validated when the sweep ran, and an old sweep's report must
still open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sweeps.config.reader import Reader
from sweeps.config.sections import objectives as mo
from sweeps.config.sections import outputs
from sweeps.config.sections.sweep import resource_budget
from sweeps.config.spec import BudgetCfg, Constraint, Objective, PromoteCfg, ReportCfg


class Record(Protocol):
    """What :func:`of` reads of a :class:`sweeps.store.SweepRecord` (the config layer does not import the store)."""

    config: dict[str, Any]
    metric: str
    mode: str
    per_trial: dict[str, float]


@dataclass(frozen=True)
class StoredTrainable:
    """The stored ``trainable`` section: what promotion calls, and the fixed params every trial had."""

    name: str | None = None
    loop: str | None = None
    builder: str | None = None
    load_model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    dataset: tuple[str, str] | None = None  # (name, digest) it declared: its models' metrics name it
    script: dict[str, Any] | None = None  # a script trainable's ``trainable.script`` (its path made absolute)

    @property
    def epochs(self) -> int | None:
        """The fixed epoch budget of every trial (``params.epochs``, or the script's epoch option), or None when
        it is not an int."""
        e = self.params.get((self.script or {}).get("epochs") or "epochs")
        return e if isinstance(e, int) and not isinstance(e, bool) else None

    @property
    def loader(self) -> tuple[str, str] | None:
        """(config key, dotted path) of what reads a checkpoint: ``load_model``, else the ``builder`` fallback."""
        for key, value in (("load_model", self.load_model), ("builder", self.builder)):
            if value:
                return f"trainable.{key}", value
        return None


@dataclass(frozen=True)
class StoredSweep:
    """The typed view of one stored sweep's config (see the module's docstring)."""

    metric: str  # the record's, else the config's sweep.metric
    mode: str  # the record's, else the config's sweep.mode, else max
    objectives: tuple[Objective, ...]  # multi-objective: the primary first; () for a single objective
    constraints: tuple[Constraint, ...]  # () for a single objective (they only shape a Pareto front)
    space: dict[str, Any]  # the declarative search space (``search_space``)
    trainable: StoredTrainable
    cpus_per_trial: float  # what one trial held: the record's per_trial, else the old formula
    gpus_per_trial: float
    budget: BudgetCfg
    report: ReportCfg
    promote: PromoteCfg
    allowed_targets: tuple[str, ...]  # security.allowed_targets as the sweep's conf files gave it
    webhook_set: bool  # notify.webhook_url was set (the record holds it redacted)

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1

    @property
    def epochs(self) -> int | None:
        return self.trainable.epochs


def of(rec: Record) -> StoredSweep:
    """The typed view of a sweep record's config, with the record's metric, mode and per-trial resources."""
    return read(rec.config, metric=rec.metric, mode=rec.mode, per_trial=rec.per_trial)


def read(config: Mapping[str, Any] | None, *, metric: str = "", mode: str = "",
         per_trial: Mapping[str, float] | None = None) -> StoredSweep:
    """The typed view of a stored (composed, redacted) config; ``metric``/``mode``/``per_trial`` as the record
    kept them (empty: from the config)."""
    r = Reader(config or {})  # its errors are dropped: see the module's docstring
    sweep_metric = r.get("sweep", "metric", "str", default=None)
    objectives, constraints = _objectives(r, sweep_metric, r.get("sweep", "mode", "str", default=None))
    cpus, gpus = cpus_gpus(per_trial) if per_trial else _old_resources(r)
    return StoredSweep(
        metric=metric or sweep_metric or "", mode=mode or r.get("sweep", "mode", "str", default="max"),
        objectives=objectives, constraints=constraints, space=dict(r.section("search_space")),
        trainable=_trainable(r), cpus_per_trial=cpus, gpus_per_trial=gpus, budget=resource_budget(r),
        report=outputs.report(r), promote=outputs.promote(r), allowed_targets=outputs.allowed_targets(r),
        webhook_set=bool(r.section("notify").get("webhook_url")),
    )


def cpus_gpus(per_trial: Mapping[str, float]) -> tuple[float, float]:
    """(CPUs, GPUs) of what one trial holds (:func:`sweeps.execution.resources.plan.per_trial`)."""
    return float(per_trial.get("CPU", 0.0)), float(per_trial.get("GPU", 0.0))


def _objectives(r: Reader, metric: str | None, mode: str | None) -> tuple[tuple[Objective, ...],
                                                                          tuple[Constraint, ...]]:
    objectives = mo.objectives(r, metric, mode)
    if len(objectives) < 2:
        return (), ()
    primary = tuple(o for o in objectives if o.metric == metric)
    return (*primary, *(o for o in objectives if o not in primary)), mo.constraints(r)


def _trainable(r: Reader) -> StoredTrainable:
    def text(key: str) -> str | None:
        return r.get("trainable", key, "str", default=None)

    data = r.get("trainable", "dataset", "map", default=None) or {}
    dataset = (str(data["name"]), str(data["digest"])) if {"name", "digest"} <= set(data) else None
    return StoredTrainable(name=text("name"), loop=text("loop"), builder=text("builder"),
                           load_model=text("load_model"),
                           params=dict(r.get("trainable", "params", "map", default={}) or {}), dataset=dataset,
                           script=r.get("trainable", "script", "map", default=None))


def _old_resources(r: Reader) -> tuple[float, float]:
    """A record written before it kept ``per_trial``: driver_cpus + num_workers x per-worker resources."""
    workers = float(r.get("trainable", "num_workers", "int", default=1) or 1)
    per_worker = r.get("trainable", "resources_per_worker", "map", default={}) or {}
    use_gpu = r.get("trainable", "use_gpu", "bool", default=False)
    cpu, gpu = float(per_worker.get("CPU", 1)), float(per_worker.get("GPU", 1 if use_gpu else 0))
    return float(r.get("cluster", "driver_cpus", "num", default=1)) + workers * cpu, workers * gpu
