"""Declarative search spaces (YAML) -> Ray Tune domains. Pure: no Ray state, no I/O.

Each parameter is a mapping with a ``dist`` and its fields::

    lr:          {dist: loguniform, low: 1.0e-4, high: 1.0e-1}
    hidden_size: {dist: choice, values: [32, 64, 128]}
    layers:      {dist: grid, values: [1, 2]}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# dist -> (required fields, optional fields)
DISTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "uniform": (("low", "high"), ()),
    "quniform": (("low", "high", "q"), ()),
    "loguniform": (("low", "high"), ("base",)),
    "qloguniform": (("low", "high", "q"), ("base",)),
    "randint": (("low", "high"), ()),
    "qrandint": (("low", "high", "q"), ()),
    "lograndint": (("low", "high"), ("base",)),
    "randn": (("mean", "sd"), ()),
    "choice": (("values",), ()),
    "grid": (("values",), ()),
}
NUMERIC_FIELDS = ("low", "high", "q", "base", "mean", "sd")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def validate_param(key: str, spec: Any) -> list[str]:
    """Problems with one parameter's spec; ``key`` is its full config key (e.g. ``search_space.lr``)."""
    if not isinstance(spec, Mapping):
        return [f"{key}: expected a mapping like {{dist: loguniform, low: 1e-4, high: 1e-1}}, got {spec!r}"]
    dist = spec.get("dist")
    if dist not in DISTS:
        return [f"{key}.dist: unknown distribution {dist!r}; choose one of {', '.join(DISTS)}"]
    required, optional = DISTS[dist]
    errors = [f"{key}.{f}: required for dist={dist}" for f in required if f not in spec]
    unknown = sorted(set(spec) - {"dist", *required, *optional})
    if unknown:
        errors.append(f"{key}: unknown field(s) {', '.join(unknown)} for dist={dist}; allowed: "
                      f"{', '.join(('dist', *required, *optional))}")
    if errors:
        return errors
    for f in NUMERIC_FIELDS:
        if f in spec and not _is_number(spec[f]):
            errors.append(f"{key}.{f}: must be a finite number, got {spec[f]!r}")
    if errors:
        return errors
    if dist in ("choice", "grid"):
        values = spec["values"]
        if not isinstance(values, list | tuple) or len(values) == 0:
            errors.append(f"{key}.values: needs a non-empty list, got {values!r}")
        return errors
    if dist == "randn":
        if spec["sd"] <= 0:
            errors.append(f"{key}.sd: must be > 0, got {spec['sd']}")
        return errors
    low, high = spec["low"], spec["high"]
    if low >= high:
        errors.append(f"{key}: low ({low}) must be < high ({high})")
    if dist in ("loguniform", "qloguniform", "lograndint") and low <= 0:
        errors.append(f"{key}.low: {dist} needs low > 0, got {low}")
    if dist in ("randint", "qrandint", "lograndint") and (int(low) != low or int(high) != high):
        errors.append(f"{key}: {dist} needs integer bounds, got low={low}, high={high}")
    if "q" in spec and spec["q"] <= 0:
        errors.append(f"{key}.q: must be > 0, got {spec['q']}")
    return errors


def validate_space(space: Mapping[str, Any], prefix: str = "search_space") -> list[str]:
    """Problems with a whole space (empty, or any bad parameter)."""
    if not space:
        return [f"{prefix}: the search space is empty; declare at least one parameter "
                f"(e.g. {prefix}.lr={{dist: loguniform, low: 1e-4, high: 1e-1}})"]
    errors: list[str] = []
    for name, spec in space.items():
        errors += validate_param(f"{prefix}.{name}", spec)
    return errors


def to_domain(spec: Mapping[str, Any], grid_choices: bool = False) -> Any:
    """One parameter spec -> a Tune domain (or ``tune.grid_search`` for grid)."""
    from ray import tune

    dist = spec["dist"]
    if dist == "grid" or (dist == "choice" and grid_choices):
        return tune.grid_search(list(spec["values"]))
    if dist == "choice":
        return tune.choice(list(spec["values"]))
    if dist == "uniform":
        return tune.uniform(spec["low"], spec["high"])
    if dist == "quniform":
        return tune.quniform(spec["low"], spec["high"], spec["q"])
    if dist == "loguniform":
        return tune.loguniform(spec["low"], spec["high"])  # any base gives the same distribution
    if dist == "qloguniform":
        return tune.qloguniform(spec["low"], spec["high"], spec["q"])
    if dist == "randint":
        return tune.randint(int(spec["low"]), int(spec["high"]))
    if dist == "qrandint":
        return tune.qrandint(int(spec["low"]), int(spec["high"]), int(spec["q"]))
    if dist == "lograndint":
        return tune.lograndint(int(spec["low"]), int(spec["high"]))
    if dist == "randn":
        return tune.randn(spec["mean"], spec["sd"])
    raise ValueError(f"unknown distribution {dist!r}")  # unreachable after validate_param


def to_tune(space: Mapping[str, Any], grid_choices: bool = False) -> dict[str, Any]:
    """A validated space -> ``{name: domain}`` for ``Tuner(param_space=...)``.

    Args:
        space: ``{name: spec}`` as in ``search_spaces/*.yaml``.
        grid_choices: the grid searcher: turn every ``choice`` into a grid axis.
    """
    return {name: to_domain(spec, grid_choices) for name, spec in space.items()}


def has_grid(space: Mapping[str, Any]) -> bool:
    return any(spec.get("dist") == "grid" for spec in space.values())
