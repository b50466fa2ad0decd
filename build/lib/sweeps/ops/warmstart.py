"""Warm start for a scheduled sweep: last night's top-k, the registered champion, a persistent Optuna study."""

from __future__ import annotations

import logging
import math
from typing import Any

from sweeps.ops import schedule

log = logging.getLogger(__name__)


BASIC_SEARCHERS = ("BasicVariantGenerator",)  # accept partial points; the others need every parameter


def _same(a: Any, b: Any) -> bool:
    """Equal, and not a bool standing in for a number (True == 1 in Python)."""
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def in_domain(value: Any, dom: dict[str, Any]) -> bool:
    """Whether ``value`` is a valid sample of one declarative search-space parameter."""
    dist = dom.get("dist")
    if dist in ("choice", "grid"):
        return any(_same(value, v) for v in dom.get("values", []))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if dist == "randn":
        return True
    if dist in ("randint", "qrandint", "lograndint") and int(value) != value:
        return False
    return bool(dom["low"] <= value <= dom["high"])


def coerce(text: str, dom: dict[str, Any]) -> Any:
    """An MLflow param (always a string) back to the space's type; None when it does not fit."""
    if dom.get("dist") in ("choice", "grid"):
        for v in dom.get("values", []):
            if str(v) == text:
                return v
        return None
    try:
        value: Any = float(text)
    except ValueError:
        return None
    if dom.get("dist") in ("randint", "qrandint", "lograndint") and value == int(value):
        value = int(value)
    return value if in_domain(value, dom) else None


def fit_points(candidates: list[dict[str, Any]], space: dict[str, dict[str, Any]], complete: bool
               ) -> list[dict[str, Any]]:
    """Keep, from each candidate, the keys of the current space whose values are still valid samples.

    With ``complete`` (Optuna, HyperOpt) a point missing any parameter is dropped; duplicates are dropped.
    """
    out: list[dict[str, Any]] = []
    for cand in candidates:
        point = {k: v for k, v in cand.items() if k in space and in_domain(v, space[k])}
        if not point or (complete and set(point) != set(space)) or point in out:
            continue
        out.append(point)
    return out


def previous_top_k(prev: Any, spec: Any) -> list[dict[str, Any]]:
    """The previous sweep's top-k configurations by the current metric (raw params, best first)."""
    from sweeps.reports.results import load_records
    from sweeps.reports.summary import collect

    k = spec.schedule.warm_start_top_k
    if k <= 0:
        return []
    records = load_records(prev.experiment_dirs, spec.sweep.metric, spec.sweep.mode, spec.trainable.epochs,
                           settled=True)
    summ = collect(records, spec.sweep.metric, spec.sweep.mode, top_k=k)
    return [dict(row.params) for row in summ.leaderboard]


def champion_params(spec: Any) -> dict[str, Any] | None:
    """The current champion's hyperparameters from the MLflow registry (its run's params), if there is one.

    Reads ``<promote.model_name or sweep.name>@<promote.alias>``; None when there is no such model/alias.
    """
    from mlflow.exceptions import MlflowException

    from sweeps.tracking import client as mc

    name = spec.promote.model_name or spec.sweep.name
    try:
        c = mc.client(spec.tracking.uri)
        mv = c.get_model_version_by_alias(name, spec.promote.alias)
        run_id = mv.run_id or (mv.tags or {}).get("run_id")  # sweeps.promote logs into the trial's run
        if not run_id:
            return None
        params = c.get_run(run_id).data.params
    except MlflowException:
        return None
    out = {k: coerce(params[k], dom) for k, dom in spec.space.items() if k in params}
    found = {k: v for k, v in out.items() if v is not None}
    if found:
        log.info("warm start: champion %s@%s (version %s) params %s", name, spec.promote.alias, mv.version,
                 found)
    return found or None


def warm_points(prev: Any, spec: Any) -> list[dict[str, Any]]:
    """Points to evaluate first: the user's own, the previous sweep's top-k, the champion's."""
    candidates: list[dict[str, Any]] = []
    if prev is not None:
        try:
            candidates += previous_top_k(prev, spec)
        except Exception as exc:  # a pruned Ray folder must not stop tonight's sweep
            log.warning("warm start: could not read sweep %s's results (%s); starting cold", prev.sweep_id,
                        exc)
    try:
        champ = champion_params(spec)
    except Exception as exc:
        log.warning("warm start: could not read the champion from the registry (%s)", exc)
        champ = None
    if champ:
        candidates.append(champ)
    complete = not str(spec.searcher["_target_"]).endswith(BASIC_SEARCHERS)
    own = [dict(p) for p in spec.sweep.points_to_evaluate]
    return own + [p for p in fit_points(candidates, spec.space, complete) if p not in own]


def optuna_overrides(name: str, spec: Any) -> list[str]:
    """Optuna: keep the study in a SQLite file per schedule so TPE learns from every night.

    The study name carries the spec digest (space, metric, mode, ...): a changed sweep starts a new study.
    """
    if not str(spec.searcher["_target_"]).endswith("OptunaSearch") or "storage" in spec.searcher:
        return []
    db = schedule.schedules_dir() / f"{name}.optuna.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return [f"++searcher.storage='sqlite:///{db}'",  # built into an RDBStorage by execution/searchers.py
            f"++searcher.study_name={name}-{spec.digest()}"]


def night_seed(name: str, spec: Any) -> list[str]:
    """``sweep.seed + n`` for the schedule's n-th run: a fixed seed would redraw last night's configurations
    and spend tonight's budget on them again. The seed used is logged with the parent run."""
    from sweeps import store

    night = sum(1 for r in store.all_records() if r.schedule == name)
    return [f"sweep.seed={spec.sweep.seed + night}"] if night else []
