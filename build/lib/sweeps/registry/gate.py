"""The champion gate and the registry's naming rules: pure functions, no I/O.

A version's lineage and recorded metric live in its tags (``VERSION_TAG_*``); the gate compares a candidate's value
with the value the alias's current version recorded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeps.errors import BadInput, GateRefused

ALIAS = re.compile(r"^[A-Za-z0-9_\-]{1,255}$")


RESERVED_ALIAS = re.compile(r"^(latest|v\d+)$", re.IGNORECASE)


EXAMPLE_ROWS = 5


# Version tags: the lineage of a registered model version (the runs sweeps writes carry other tags, under
# other names: sweeps.tracking.client.RUN_TAG_*).
VERSION_TAG_SWEEP = "sweep_id"


VERSION_TAG_TRIAL = "trial_id"


VERSION_TAG_METRIC = "metric"


VERSION_TAG_VALUE = "metric_value"


VERSION_TAG_MODE = "mode"


VERSION_TAG_GIT = "git_commit"


VERSION_TAG_DIGEST = "config_digest"


VERSION_TAG_RUN = "run_id"


VERSION_TAG_CHECKPOINT = "checkpoint"


VERSION_TAG_FORCED = "forced"


VERSION_TAG_TASK = "task"


EVAL_TAGS = ("accuracy", "rmse", "perplexity")


# -- pure rules ---------------------------------------------------------------------------------------------
def check_model_name(name: str | None, key: str = "--model-name") -> str:
    """The name, or BadInput when it is empty, path-like or has odd characters."""
    from sweeps.config.naming import model_name_errors

    errors = model_name_errors(key, name or "")
    if errors:
        raise BadInput(*errors)
    return str(name)


def check_alias(alias: str | None, key: str = "--alias") -> str:
    """The alias, or BadInput (MLflow aliases: letters, digits, ``_``, ``-``; not ``latest`` nor ``v<N>``)."""
    if not alias or not ALIAS.match(alias):
        raise BadInput(f"{key}: {alias!r} is not a valid alias; use letters, digits, _ or - (e.g. champion)")
    if RESERVED_ALIAS.match(alias):
        raise BadInput(f"{key}: {alias!r} is reserved by MLflow (latest, v1, v2...); choose another, e.g. "
                       f"champion")
    return alias


def is_better(new: float, old: float, mode: str) -> bool:
    """True when ``new`` is strictly better than ``old`` under ``mode`` (NaN is never better)."""
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be min or max, got {mode!r}")
    if not math.isfinite(new):
        return False
    if not math.isfinite(old):
        return True
    return new > old if mode == "max" else new < old


@dataclass(frozen=True)
class Champion:
    """What the alias points at now, as recorded in that version's tags."""

    version: str
    metric: str | None
    mode: str | None
    value: float | None
    tags: Mapping[str, str] = field(default_factory=dict, compare=False)  # every tag, for rule gates

    @classmethod
    def from_tags(cls, version: str, tags: Mapping[str, str]) -> Champion:
        return cls(version=str(version), metric=tags.get(VERSION_TAG_METRIC), mode=tags.get(VERSION_TAG_MODE),
                   value=_float(tags.get(VERSION_TAG_VALUE)), tags=dict(tags))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def gate(champion: Champion | None, *, name: str, alias: str, metric: str, mode: str, value: float,
         force: bool = False, rule: str = "best", second: tuple[str, str, float] | None = None) -> str | None:
    """Decide whether a candidate may take the alias.

    Returns a note on what it replaces (None when the alias is free). Raises GateRefused when the champion is
    better or equal, or when the champion's record cannot be compared (another metric or mode, no value),
    unless ``force``. Under ``rule`` ``cheapest_within:PCT`` with a ``second`` objective both recorded, a
    candidate within PCT % of the champion's primary value wins by being cheaper (``choice.rule_better``).
    """
    from sweeps.registry.choice import rule_better

    if champion is None:
        return None
    where = f"{name}@{alias} (version {champion.version})"
    if champion.metric != metric or champion.mode != mode or champion.value is None:
        note = (f"{where} recorded {champion.metric or '?'} = {champion.value} ({champion.mode or '?'}), "
                f"which cannot be compared with {metric} ({mode})")
        if force:
            return f"replaced {note} (forced)"
        raise GateRefused(f"promote: {note}; nothing registered. Pass --force to promote anyway, or use "
                          f"another --model-name/--alias")
    summary = f"{where} has {metric} = {champion.value:.6g}"
    by_rule = rule_better(rule, mode, value, champion.value, second, champion.tags)
    if by_rule if by_rule is not None else is_better(value, champion.value, mode):
        return f"replaced {summary}" + (f" (rule {rule})" if by_rule is not None else "")
    if force:
        return f"replaced {summary} (forced; candidate {value:.6g} is not better)"
    how = f" under rule {rule}" if by_rule is not None else ""
    raise GateRefused(f"promote: {summary} ({mode}), at least as good as the candidate's {value:.6g}{how}; "
                      f"nothing registered. Pass --force to promote anyway")


def score(task: str, pred: Any, y: Any, labels: Any = ()) -> dict[str, float]:
    """The served model's answers against the truth, in the task's terms.

    ``pred`` holds the served model's output columns: ``label`` (classification; ``y`` holds class indices
    into ``labels``, or the labels themselves), ``prediction`` (regression; ``y`` in the same units), or
    ``scored`` and ``log_likelihood`` per string (text; ``y`` unused) -> accuracy, rmse, perplexity.
    """
    import numpy as np

    if task == "text":
        n = float(np.sum(pred["scored"]))
        return {"perplexity": math.exp(-float(np.sum(pred["log_likelihood"])) / n) if n else math.nan}
    y = np.asarray(y)
    if task == "classification":
        truth = (np.asarray(list(labels), dtype=object)[y.astype(np.int64)]
                 if np.issubdtype(y.dtype, np.integer) and len(labels) else y.astype(object))
        return {"accuracy": float(np.mean(np.asarray(pred["label"], dtype=object) == truth))}
    err = np.asarray(pred["prediction"], dtype=np.float64) - y.astype(np.float64)
    return {"rmse": float(np.sqrt(np.mean(err ** 2)))}
