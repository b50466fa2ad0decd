"""Multi-objective sweeps: ``sweep.objectives``, ``sweep.constraints`` and the searchers that can run them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sweeps.config.reader import Reader, mlflow_name_errors
from sweeps.config.spec import Constraint, Objective, SweepCfg, TrainableCfg

CONSTRAINT = re.compile(r"^\s*(<=|>=|<|>)\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$", re.IGNORECASE)
# Optuna samplers that take several objectives, and those among them that take a constraints_func
MULTI_SAMPLERS = ("NSGAIISampler", "NSGAIIISampler", "TPESampler", "RandomSampler", "QMCSampler", "GPSampler",
                  "BruteForceSampler")
CONSTRAINED_SAMPLERS = ("NSGAIISampler", "NSGAIIISampler", "TPESampler", "GPSampler")
RULE = re.compile(r"^(best_primary|cheapest_within:[0-9]+(\.[0-9]+)?)$")


def objectives(r: Reader, metric: Any, mode: Any) -> tuple[Objective, ...]:
    """``sweep.objectives``; the primary (``sweep.metric``/``mode``) comes first."""
    raw = r.get("sweep", "objectives", "list", default=[]) or []
    out: list[Objective] = []
    for i, node in enumerate(raw):
        key = f"sweep.objectives[{i}]"
        if not isinstance(node, Mapping) or set(node) != {"metric", "mode"}:
            r.errors.append(f"{key}: expected {{metric: NAME, mode: min|max}}, got {node!r}")
            continue
        if node["mode"] not in ("min", "max"):
            r.errors.append(f"{key}.mode: {node['mode']!r} is not allowed; choose one of min, max")
            continue
        r.errors += mlflow_name_errors(f"{key}.metric", str(node["metric"]))
        out.append(Objective(str(node["metric"]), str(node["mode"])))
    if not out:
        return ()
    names = [o.metric for o in out]
    if len(set(names)) != len(names) or len(out) < 2:
        r.errors.append(f"sweep.objectives: needs at least two different metrics, got {', '.join(names)}")
    primary = [o for o in out if o.metric == metric]
    if not primary or primary[0].mode != mode:
        r.errors.append(f"sweep.objectives: must hold the primary objective sweep.metric={metric!r} with "
                        f"sweep.mode={mode!r} (the scheduler and the checkpoints rank by it)")
        return tuple(out)
    return (primary[0], *(o for o in out if o.metric != metric))


def constraints(r: Reader) -> tuple[Constraint, ...]:
    """``sweep.constraints: {model/latency_ms: "<= 2.0"}``."""
    node = r.get("sweep", "constraints", "map", default={}) or {}
    out = []
    for metric, text in node.items():
        m = CONSTRAINT.match(str(text))
        if not m:
            r.errors.append(f"sweep.constraints.{metric}: {text!r} is not a bound; write e.g. \"<= 2.0\" "
                            f"(one of <=, <, >=, > and a number)")
            continue
        out.append(Constraint(str(metric), m.group(1), float(m.group(2))))
    return tuple(out)


def cross_errors(sweep: SweepCfg, trainable: TrainableCfg, searcher: Mapping[str, Any], rule: str) -> list[str]:
    """What Ray or Optuna cannot run, refused before launch."""
    errors = []
    declared = set(trainable.metrics)
    for name in [*(o.metric for o in sweep.objectives), *(c.metric for c in sweep.constraints)]:
        if declared and name not in declared:
            errors.append(f"sweep.objectives/constraints: {name!r} is not reported by trainable "
                          f"{trainable.name!r}; it reports {', '.join(sorted(declared))}")
    if not RULE.match(rule):
        errors.append(f"promote.rule: {rule!r} is not a rule; use best_primary or cheapest_within:PCT "
                      f"(e.g. cheapest_within:0.5)")
    elif rule != "best_primary" and not sweep.multi:
        errors.append(f"promote.rule: {rule} needs sweep.objectives (a second objective to be cheap in)")
    if not sweep.multi:
        return errors
    return errors + _searcher_errors(searcher, bool(sweep.constraints))


def _searcher_errors(searcher: Mapping[str, Any], constrained: bool) -> list[str]:
    target = str(searcher.get("_target_", ""))
    if target.endswith("HyperOptSearch"):
        return ["searcher=hyperopt: HyperOpt optimizes one objective; with sweep.objectives use searcher=optuna "
                "(NSGA-II: searcher.sampler._target_=optuna.samplers.NSGAIISampler) or random/grid"]
    if not target.endswith(("OptunaSearch", "BasicVariantGenerator")):
        return [f"searcher: {target} cannot take several objectives; use searcher=optuna, random or grid"]
    sampler = str((searcher.get("sampler") or {}).get("_target_", ""))
    if target.endswith("OptunaSearch") and sampler and not sampler.endswith(MULTI_SAMPLERS):
        return [f"searcher.sampler: {sampler} optimizes one objective; use one of "
                f"{', '.join('optuna.samplers.' + s for s in MULTI_SAMPLERS)}"]
    if constrained and sampler and not sampler.endswith(CONSTRAINED_SAMPLERS):
        return []  # the sampler ignores constraints; they still decide the front and promotion
    return []


def constrained_sampler(searcher: Mapping[str, Any]) -> bool:
    """Whether the searcher's Optuna sampler takes a ``constraints_func``."""
    sampler = str((searcher.get("sampler") or {}).get("_target_", ""))
    return str(searcher.get("_target_", "")).endswith("OptunaSearch") and sampler.endswith(CONSTRAINED_SAMPLERS)
