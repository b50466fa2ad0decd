"""Hyperparameter importance for the sweep metric: Optuna's fANOVA over the ranked trials."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps.reports.summary import Summary, _finite

log = logging.getLogger(__name__)
MIN_IMPORTANCE_TRIALS = 3
CACHE_DIR = ".importance"  # under the sweep index (SWEEPS_HOME/sweeps): per sweep, the last figures and the trials
# they were computed over; never in a report's folder (that holds what the user asked for, nothing else)


MAX_IMPORTANCE_TRIALS = (
    3000  # beyond this, an evenly spaced sample over the ranking (fANOVA's forest is slow)
)


def _optuna_distribution(spec: Mapping[str, Any], observed: list[Any]) -> Any:
    """A search-space entry (``{dist: loguniform, low, high}``) -> an Optuna distribution covering
    ``observed``."""
    from optuna import distributions as d

    dist = spec.get("dist")
    if dist in ("choice", "grid") or not all(_finite(v) for v in observed):
        values = [_categorical(v) for v in [*spec.get("values", []), *observed]]
        return d.CategoricalDistribution(list(dict.fromkeys(values)))
    lo, hi = min(observed), max(observed)
    if _finite(spec.get("low")) and _finite(spec.get("high")):
        lo, hi = min(lo, spec["low"]), max(hi, spec["high"])
    log = dist in ("loguniform", "qloguniform", "lograndint") and lo > 0
    if dist in ("randint", "qrandint", "lograndint") and all(float(v).is_integer() for v in observed):
        return d.IntDistribution(int(math.floor(lo)), int(math.ceil(hi)), log=log)
    return d.FloatDistribution(float(lo), float(hi), log=log)


def _categorical(v: Any) -> Any:
    return v if v is None or isinstance(v, bool | int | float | str) else str(v)


def param_importances(
    summ: Summary, space: Mapping[str, Any], seed: int = 0
) -> tuple[dict[str, float], str | None]:
    """Hyperparameter importance for the sweep metric (Optuna's fANOVA) over the ranked trials.

    An in-memory Optuna study is built from the trials that have a finite best value and are not failed
    (early-stopped trials count, with the best value they reached); parameters come from ``space`` (the
    sweep's declarative search space) plus any other parameter that varies. Returns ``({}, why)`` when it
    cannot say anything (fewer than 3 such trials, or nothing varies).
    """
    by_id = {r.trial_id: r for r in summ.rows}
    rows = [by_id[t] for t in summ.ranked]
    if len(rows) < MIN_IMPORTANCE_TRIALS:
        return (
            {},
            f"needs at least {MIN_IMPORTANCE_TRIALS} finished trials with a finite {summ.metric}, "
            f"got {len(rows)}",
        )
    if len(rows) > MAX_IMPORTANCE_TRIALS:
        rows = rows[:: math.ceil(len(rows) / MAX_IMPORTANCE_TRIALS)]
    names = [
        n
        for n in summ.param_names()
        if all(n in r.params for r in rows) and len({repr(r.params[n]) for r in rows}) > 1
    ]
    if not names:
        return {}, "no hyperparameter varies across the finished trials"
    if len(names) == 1 and len({r.best for r in rows}) > 1:
        return {names[0]: 1.0}, None  # fANOVA's only parameter explains all the variance it finds
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {n: _optuna_distribution(space.get(n) or {}, [r.params[n] for r in rows]) for n in names}
    study = optuna.create_study(direction="maximize" if summ.mode == "max" else "minimize")
    study.add_trials(
        [
            create_trial(
                params={n: _categorical(r.params[n]) for n in names}, distributions=dists, value=r.best
            )
            for r in rows
        ]
    )
    try:
        result = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed), normalize=True)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return {}, f"Optuna could not evaluate importances ({exc})"
    return {k: float(v) for k, v in result.items()}, None


def cache_path(sweep_id: str) -> Path:
    """Where a sweep's importances are kept between reports: under the sweep index, by sweep id."""
    from sweeps import paths

    return paths.index_dir() / CACHE_DIR / f"{sweep_id}.json"


def cached_importances(summ: Summary, space: Mapping[str, Any], path: Path,
                       seed: int = 0) -> tuple[dict[str, float], str | None]:
    """:func:`param_importances`, kept in ``path`` (:func:`cache_path`) with a digest of what they were computed
    over (the ranked trials' parameters and best values, the metric, the space, the seed): a report written again
    over the same trials reads them back instead of fitting fANOVA's forest again (tens of seconds over thousands
    of trials)."""
    by_id = {r.trial_id: r for r in summ.rows}
    basis = json.dumps([summ.metric, summ.mode, seed, repr(sorted(space.items())),
                        [(t, repr(sorted(by_id[t].params.items())), repr(by_id[t].best)) for t in summ.ranked]])
    digest = hashlib.sha256(basis.encode()).hexdigest()
    try:
        kept = json.loads(path.read_text())
        if kept.get("digest") == digest:
            return {str(k): float(v) for k, v in kept["importances"].items()}, kept.get("why")
    except (OSError, ValueError, KeyError, AttributeError):
        pass  # none yet, or unreadable: computed afresh
    imp, why = param_importances(summ, space, seed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"digest": digest, "importances": imp, "why": why}))
    except OSError as exc:
        log.debug("could not keep the importances in %s (%s)", path, exc)
    return imp, why
