"""Which trial a promotion takes, and the value the gate compares: pure, over the sweep's stored results.

Three ways, in this order:

- ``confirmed`` (``promote --confirmed`` or ``promote.require_confirmed``): the configuration ``sweeps confirm``
  ranked first by the pessimistic end of its 95% interval; the checkpoint is that configuration's best re-run
  and the gate compares the **pessimistic bound**, which is what the version records.
- a multi-objective sweep (``sweep.objectives``): a trial of the feasible Pareto front, picked by the rule
  (``best_primary`` or ``cheapest_within:PCT``); the gate compares on the same rule (:func:`rule_better`).
- otherwise: the sweep's best trial by its metric (or ``--trial``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeps.config import stored
from sweeps.errors import BadInput

VERSION_TAG_RULE = "promote_rule"
VERSION_TAG_SECOND_METRIC = "second_metric"
VERSION_TAG_SECOND_VALUE = "second_value"
VERSION_TAG_SECOND_MODE = "second_mode"
VERSION_TAG_CONFIRMED = "confirmed"
VERSION_TAG_BOUND = "pessimistic_bound"
VERSION_TAG_FRONT = "pareto_front"


@dataclass(frozen=True)
class Choice:
    """The trial to promote, where its records live, and what the gate and the version's tags get."""

    trial_id: str
    rule: str  # best | best_primary | cheapest_within:PCT | confirmed
    value: float | None = None  # the gate's value when not the trial's own best (a bound, a front point)
    second: tuple[str, str, float] | None = None  # (metric, mode, value): the rule's second objective
    from_confirm: bool = False  # the trial is one of `sweeps confirm`'s re-runs
    tags: dict[str, str] = field(default_factory=dict)


def rule_of(sweep: stored.StoredSweep, given: str | None) -> str:
    """The rule: the one given on the command line, else the sweep's ``promote.rule``."""
    return given or sweep.promote.rule


def confirmed_choice(rec: Any, confirm_records: Sequence[Any]) -> Choice:
    """The confirmed winner's best re-run, gated on the winner's pessimistic bound."""
    from sweeps.reports.summary import best_value
    from sweeps.trials import config_digest

    if not rec.confirmed:
        raise BadInput(f"--confirmed: sweep {rec.sweep_id} has no confirmed winner; run `python -m sweeps confirm "
                       f"{rec.sweep_id}` first (or promote without --confirmed and promote.require_confirmed)")
    win = rec.confirmed[0]
    sign = 1.0 if rec.mode == "max" else -1.0
    runs = [(best_value(r.values(rec.metric), rec.mode), r) for r in confirm_records
            if r.status != "ERROR" and config_digest({k: v for k, v in r.params.items() if k != "seed"})
            == win["digest"]]
    runs = [(v, r) for v, r in runs if math.isfinite(v)]
    if not runs:
        raise BadInput(f"--confirmed: no successful re-run of the confirmed winner {win['digest']} is left in "
                       f"{', '.join(rec.confirm_dirs)}; run `python -m sweeps confirm {rec.sweep_id}` again")
    _, best = max(runs, key=lambda vr: sign * vr[0])
    bound = float(win["pessimistic"])
    return Choice(best.trial_id, "confirmed", value=bound, from_confirm=True,
                  tags={VERSION_TAG_CONFIRMED: "true", VERSION_TAG_BOUND: repr(bound), "confirmed_n": str(win["n"]),
                        "confirmed_mean": repr(float(win["mean"]))})


def front_choice(rec: Any, records: Sequence[Any], rule: str) -> Choice | None:
    """A trial from the feasible front by ``rule``; None when the sweep has a single objective."""
    from sweeps.reports import pareto

    sweep = stored.read(rec.config)
    objectives, constraints = sweep.objectives, sweep.constraints
    if not objectives:
        return None
    pts = pareto.points(records, objectives, constraints)
    point = pareto.pick(pts, objectives, rule)
    if point is None:
        cons = ", ".join(f"{c.metric} {c.op} {c.bound:g}" for c in constraints) or "(none)"
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} has no feasible trial on its Pareto front (constraints: "
                       f"{cons}); nothing to promote")
    second = (objectives[1].metric, objectives[1].mode, point.values[1])
    return Choice(point.trial_id, rule, value=point.values[0], second=second,
                  tags={VERSION_TAG_RULE: rule, VERSION_TAG_FRONT: "true", VERSION_TAG_SECOND_METRIC: second[0],
                        VERSION_TAG_SECOND_MODE: second[1], VERSION_TAG_SECOND_VALUE: repr(second[2])})


def rule_better(rule: str, mode: str, new: float, old: float, new_second: tuple[str, str, float] | None,
                old_tags: Mapping[str, str]) -> bool | None:
    """The gate under ``cheapest_within:PCT``: better by more than PCT % on the primary metric, or within PCT %
    and strictly better on the same second objective. None when the rule does not apply (plain comparison)."""
    if not rule.startswith("cheapest_within:") or new_second is None:
        return None
    if (old_tags.get(VERSION_TAG_SECOND_METRIC), old_tags.get(VERSION_TAG_SECOND_MODE)) != new_second[:2]:
        return None
    try:
        old_second = float(old_tags[VERSION_TAG_SECOND_VALUE])
    except (KeyError, ValueError):
        return None
    if not (math.isfinite(new) and math.isfinite(old)):
        return None
    tol = abs(old) * float(rule.split(":", 1)[1]) / 100
    gain = new - old if mode == "max" else old - new
    if gain > tol:
        return True
    if gain < -tol:
        return False
    return new_second[2] < old_second if new_second[1] == "min" else new_second[2] > old_second
