"""What a sweep leaves behind and who may extend it: the ``report``, ``promote``, ``schedule`` and
``security`` sections."""

from __future__ import annotations

from sweeps.config.naming import model_name_errors
from sweeps.config.reader import Reader
from sweeps.config.spec import PromoteCfg, ReportCfg, ScheduleCfg


def report(r: Reader) -> ReportCfg:
    return ReportCfg(r.get("report", "enabled", "bool", default=True), r.get("report", "dir", "str", default="reports"),
                     r.get("report", "top_k", "int", default=5))


def promote(r: Reader) -> PromoteCfg:
    model_name = r.get("promote", "model_name", "str", default=None)
    if model_name is not None:
        r.errors += model_name_errors("promote.model_name", model_name)
    return PromoteCfg(r.get("promote", "enabled", "bool", default=False), model_name,
                      r.get("promote", "alias", "str", default="champion"))


def schedule(r: Reader) -> ScheduleCfg:
    top_k = r.get("schedule", "warm_start_top_k", "int", default=3)
    tolerance = r.get("schedule", "regression_tolerance", "num", default=None)
    if isinstance(top_k, int) and top_k < 0:
        r.errors.append(f"schedule.warm_start_top_k: must be >= 0, got {top_k}")
    if tolerance is not None and tolerance < 0:
        r.errors.append(f"schedule.regression_tolerance: must be >= 0 (or null for no check), got {tolerance}")
    return ScheduleCfg(r.section("schedule").get("name"), int(top_k if top_k is not None else 3),
                       float(tolerance) if tolerance is not None else None)


def allowed_targets(r: Reader) -> tuple[str, ...]:
    allowed = r.get("security", "allowed_targets", "list", default=[]) or []
    return tuple(str(a) for a in allowed)
