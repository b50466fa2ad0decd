"""Scheduler rules that Ray guards with asserts (gone under ``python -O``) or not at all.

One checker per family: successive halving (ASHA, HyperBand, and promotion ASHA and PASHA, which also need a
checkpoint on every rung), the median rule, PBT/PB2.
"""

from __future__ import annotations

import math
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


PROMOTING = ("PromotionASHA", "PASHA")  # sweeps.execution.tuning.promotion: pause at rungs, resume from there


def milestones(max_t: float, grace_period: float, reduction_factor: float) -> list[float]:
    """Successive halving's rungs, lowest first, ending at ``max_t``: ``grace_period * reduction_factor**k`` below
    it, then it (the rungs :mod:`sweeps.execution.tuning.ladder` pauses at).

    >>> milestones(27, 1, 3)
    [1.0, 3.0, 9.0, 27.0]
    """
    out, r = [], float(grace_period)
    while r < max_t - 1e-9:
        out.append(r)
        r *= reduction_factor
    return [*out, float(max_t)]


def _rungs(sched: Mapping[str, Any]) -> list[float]:
    """The rungs a promoting scheduler pauses at (below ``max_t``)."""
    nums = [sched.get("max_t"), sched.get("grace_period", 1), sched.get("reduction_factor", 4)]
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in nums):
        return []  # reported by _Nums
    max_t, grace, rf = (float(v) for v in nums)
    if grace <= 0 or rf <= 1:
        return []  # reported by _halving
    return milestones(max_t, grace, rf)[:-1]


def _promoting(sched: Mapping[str, Any], num: _Nums, every: Any) -> list[str]:
    """A promoted trial resumes from the checkpoint of the rung it paused at: one must land on every rung."""
    errors: list[str] = []
    eps = num("epsilon")
    if eps is not None and eps < 0:
        errors.append(f"scheduler.epsilon: must be >= 0 (a difference of the metric), got {eps:g}")
    if sched.get("time_attr", "training_iteration") == "time_total_s" or not isinstance(every, int):
        return errors
    rungs = _rungs(sched)
    # a counter of whole steps reaches a rung at its first step at or past it, where the checkpoint must be
    steps = [math.ceil(r - 1e-9) for r in rungs]
    off = [s for s in steps if every <= 0 or s % every != 0]
    if off:
        fix = math.gcd(*steps)
        how = f"set trainable.checkpoint_every={fix} (it divides every rung)"
        if fix == 1 and not all(r == int(r) for r in rungs):
            how = "set trainable.checkpoint_every=1 (the rungs are not whole multiples of one another)"
        errors.append(f"trainable.checkpoint_every ({every}) does not land on every rung of "
                      f"scheduler={sched.get('name', 'asha_promote')} (it pauses at {', '.join(map(str, steps))}"
                      f"; no checkpoint at {', '.join(map(str, off))}): a promoted trial would resume before its "
                      f"rung and run its epochs again; {how}")
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
    if _is(sched, ("asha", "hyperband", "asha_promote", "pasha"),
           ("ASHAScheduler", "AsyncHyperBandScheduler", "HyperBandScheduler", *PROMOTING)):
        errors += _halving(sched, num, trainable.epochs)
    if _is(sched, ("asha_promote", "pasha"), PROMOTING):
        errors += _promoting(sched, num, trainable.checkpoint_every)
    if _is(sched, ("median",), ("MedianStoppingRule",)):
        grace = num("grace_period")
        if grace is not None and grace < 0:
            errors.append(f"scheduler.grace_period: must be >= 0, got {grace:g}")
    if _is(sched, ("pbt", "pb2"), ("PopulationBasedTraining", "PB2")):
        errors += _population(sched, num, trainable, space_cfg)
    return errors
