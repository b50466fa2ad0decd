"""Scheduler rules that Ray guards with asserts (gone under ``python -O``) or not at all.

One checker per family: successive halving (ASHA, HyperBand), the median rule, PBT/PB2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeps.config import space
from sweeps.config.spec import TrainableCfg

TIME_ATTRS = ("training_iteration", "epoch", "time_total_s")


class _Nums:
    """Numeric scheduler arguments, with an error for any that is not a number."""

    def __init__(self, sched: Mapping[str, Any], errors: list[str]) -> None:
        self.sched, self.errors = sched, errors

    def __call__(self, key: str) -> float | None:
        v = self.sched.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.errors.append(f"scheduler.{key}: must be a number, got {v!r}")
            return None
        return float(v)


def _is(sched: Mapping[str, Any], names: tuple[str, ...], classes: tuple[str, ...]) -> bool:
    return str(sched.get("name", "")) in names or str(sched.get("_target_", "")).endswith(classes)


def _halving(sched: Mapping[str, Any], num: _Nums, epochs: Any) -> list[str]:
    errors: list[str] = []
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
    return errors


def _mutation_errors(key: str, mutations: Mapping[str, Any], trainable: TrainableCfg,
                     space_cfg: Mapping[str, Any]) -> list[str]:
    if not mutations:
        return [f"scheduler.{key}: PBT needs at least one mutation, e.g. "
                f"scheduler.{key}.lr={{dist: loguniform, low: 1e-4, high: 1e-1}}"]
    errors: list[str] = []
    if key == "hyperparam_bounds":
        for pname, bounds in mutations.items():
            ok = (isinstance(bounds, list | tuple) and len(bounds) == 2
                  and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
                  and bounds[0] < bounds[1])
            if not ok:
                errors.append(f"scheduler.hyperparam_bounds.{pname}: expected [low, high] with low < high, "
                              f"got {bounds!r}")
        return errors
    errors += space.validate_space(mutations, prefix=f"scheduler.{key}")
    unknown = sorted(set(mutations) - set(space_cfg) - set(trainable.params or {}))
    if unknown:
        errors.append(f"scheduler.{key}: {', '.join(unknown)} not in the search space or trainable params; "
                      f"mutable: {', '.join(sorted(set(space_cfg)))}")
    return errors


def _population(sched: Mapping[str, Any], num: _Nums, trainable: TrainableCfg,
                space_cfg: Mapping[str, Any]) -> list[str]:
    key = "hyperparam_bounds" if _is(sched, ("pb2",), ("PB2",)) else "hyperparam_mutations"
    errors = _mutation_errors(key, sched.get(key) or {}, trainable, space_cfg)
    interval, qf, rp = num("perturbation_interval"), num("quantile_fraction"), num("resample_probability")
    if interval is not None and interval <= 0:
        errors.append(f"scheduler.perturbation_interval: must be > 0, got {interval:g}")
    if qf is not None and not 0 <= qf <= 0.5:
        errors.append(f"scheduler.quantile_fraction: must be within [0, 0.5], got {qf:g}")
    if rp is not None and not 0 <= rp <= 1:
        errors.append(f"scheduler.resample_probability: must be within [0, 1], got {rp:g}")
    every = trainable.checkpoint_every
    if isinstance(every, int) and interval is not None and interval > 0:
        if every <= 0:
            errors.append("trainable.checkpoint_every: PBT needs checkpoints, but the trainable never "
                          "checkpoints (checkpoint_every <= 0); PBT would silently degrade to random search")
        elif every > interval or interval % every != 0:
            errors.append(f"trainable.checkpoint_every ({every}) must divide scheduler.perturbation_interval"
                          f" ({interval:g}): PBT exploits from checkpoints and would otherwise find none")
    return errors


def scheduler_errors(sched: Mapping[str, Any], trainable: TrainableCfg, space_cfg: Mapping[str, Any]) -> list[str]:
    """Every problem with the scheduler section, given the trainable and the search space."""
    errors: list[str] = []
    num = _Nums(sched, errors)
    if "time_attr" in sched and sched["time_attr"] not in TIME_ATTRS:
        errors.append(f"scheduler.time_attr: {sched['time_attr']!r} is not a monotonic counter; use "
                      f"{', '.join(TIME_ATTRS)}")
    if _is(sched, ("asha", "hyperband"), ("ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler")):
        errors += _halving(sched, num, trainable.epochs)
    if _is(sched, ("median",), ("MedianStoppingRule",)):
        grace = num("grace_period")
        if grace is not None and grace < 0:
            errors.append(f"scheduler.grace_period: must be >= 0, got {grace:g}")
    if _is(sched, ("pbt", "pb2"), ("PopulationBasedTraining", "PB2")):
        errors += _population(sched, num, trainable, space_cfg)
    return errors
