"""Hydra's sweep overrides -> a ``sweeps`` search space (``search_spaces/*.yaml`` syntax). Pure: no I/O.

=================================  ===============================================================
Hydra                              search space entry
=================================  ===============================================================
``x=a,b`` / ``choice(a, b)``       ``{dist: choice, values: [a, b]}`` (a grid axis with searcher=grid)
``range(1, 5)`` (ints, step 1)     ``{dist: randint, low: 1, high: 5}`` (high excluded, as in range)
``tag(log, range(1, 65))``         ``{dist: lograndint, low: 1, high: 65}``
other ``range(...)``, ``shuffle``  ``{dist: choice, values: [...]}`` (the values Hydra would run)
``interval(a, b)``                 ``{dist: uniform, low: a, high: b}``
``tag(log, interval(a, b))``       ``{dist: loguniform, low: a, high: b}``
``tag(int, interval(a, b))``       ``{dist: randint, low: a, high: b + 1}`` (both ends included)
``tag(int, log, interval(a, b))``  ``{dist: lograndint, low: a, high: b + 1}``
=================================  ===============================================================

A choice over a config group (``model=small,large``, ``glob(*)``) is a ``choice`` of option names: the sweeper
composes one base config per option. Every other override is fixed: it takes part in the composition.
"""


from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LOG, INT = "log", "int"


@dataclass(frozen=True)
class SpacePlan:
    """What the sweeper makes of the overrides.

    Attributes:
        space: ``{name: {dist: ..., ...}}``, the name being the override's key (``lr``, ``model.lr``, ``model``).
        fixed: the overrides that are not sweeps, as typed (``epochs=3``, ``~aux``, ``+extra=1``).
        groups: the names in ``space`` that choose a config group's option (composed, not assigned).
        probes: one override per swept name, with a value from its range: composing with them proves every
            key can be set (and adds the ``+new`` ones to the base config the trials start from).
    """

    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    fixed: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)


class SweepSyntaxError(ValueError):
    """An override the sweeper cannot turn into a search space entry; the message names it."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _num(x: float) -> int | float:
    """Whole floats as ints: ``interval(1, 8)`` arrives as 1.0 and 8.0."""
    return int(x) if float(x).is_integer() else float(x)


def _interval(name: str, value: Any) -> dict[str, Any]:
    low, high, tags = value.start, value.end, set(value.tags or ())
    if INT in tags:
        if not (float(low).is_integer() and float(high).is_integer()):
            raise SweepSyntaxError(f"{name}: tag(int, interval({low}, {high})) needs whole-number ends")
        return {"dist": "lograndint" if LOG in tags else "randint", "low": int(low), "high": int(high) + 1}
    return {"dist": "loguniform" if LOG in tags else "uniform", "low": float(low), "high": float(high)}


def _range(name: str, value: Any, values: list[Any], discrete: bool) -> dict[str, Any]:
    if not values:
        raise SweepSyntaxError(f"{name}: range({value.start}, {value.stop}, {value.step}) holds no value")
    whole = _is_int(value.start) and _is_int(value.stop) and (value.step is None or _is_int(value.step))
    if whole and (value.step in (None, 1)) and not value.shuffle and not discrete:
        return {"dist": "lograndint" if LOG in (value.tags or ()) else "randint", "low": value.start,
                "high": value.stop}
    return {"dist": "choice", "values": sorted(values) if value.shuffle else values}


def entry(override: Any, values: list[Any] | None = None, discrete: bool = False) -> dict[str, Any]:
    """One sweep override (a parsed ``hydra.core.override_parser.types.Override``) -> its space entry.

    Args:
        override: a sweep override (``override.is_sweep_override()``).
        values: the discrete values Hydra would run (``list(override.sweep_iterator())``), for choice,
            range and glob; None for an interval.
        discrete: the searcher enumerates (searcher=grid): every range becomes a list of values.

    Example: ``lr=tag(log, interval(1e-4, 1e-1))`` -> ``{"dist": "loguniform", "low": 0.0001, "high": 0.1}``.
    """
    name = override.key_or_group
    if override.is_interval_sweep():
        return _interval(name, override.value())
    if override.is_range_sweep():
        return _range(name, override.value(), list(values or []), discrete)
    if not values:
        raise SweepSyntaxError(f"{name}: {override.input_line!r} gives no value to choose from")
    return {"dist": "choice", "values": list(values)}


def probe(override: Any, spec: dict[str, Any]) -> str:
    """``key=value`` with a value the entry can take: the override's own first value, or an interval's low."""
    if spec["dist"] == "choice":
        first = next(iter(override.sweep_string_iterator()))
        return f"{override.get_key_element()}={first}"
    return f"{override.get_key_element()}={_num(spec['low'])}"


def _is_glob(override: Any) -> bool:
    from hydra.core.override_parser.types import Glob

    return isinstance(override.value(), Glob)


def plan(overrides: Iterable[Any], is_group: Any, discrete: bool = False) -> SpacePlan:
    """Split parsed overrides into the search space, the fixed overrides and the config-group choices.

    Args:
        overrides: parsed overrides, later ones winning for the same key (``hydra.sweeper.params`` first).
        is_group: ``is_group(override) -> bool``: the override picks a config group's option.
        discrete: see :func:`entry`.
    """
    last: dict[str, Any] = {}
    for o in overrides:
        last[o.key_or_group] = o
    out = SpacePlan()
    for name, o in last.items():
        if not o.is_sweep_override():
            out.fixed.append(o.input_line)
            continue
        if o.is_delete():
            raise SweepSyntaxError(f"{name}: {o.input_line!r} deletes and sweeps at once")
        group = o.is_discrete_sweep() and is_group(o)
        if _is_glob(o) and not group:
            raise SweepSyntaxError(f"{name}: glob(...) chooses among a config group's options, and {name!r} is "
                                   f"not a config group")
        values = None if o.is_interval_sweep() else list(o.sweep_iterator())
        out.space[name] = entry(o, values, discrete)
        out.probes.append(probe(o, out.space[name]))
        if group:
            out.groups.append(name)
    return out
