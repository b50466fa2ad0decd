"""What a sweep leaves behind and who may extend it: the ``report``, ``promote``, ``schedule`` and
``security`` sections."""

from __future__ import annotations

from sweeps.config.naming import alias_errors, model_name_errors
from sweeps.config.reader import Reader
from sweeps.config.spec import ConfirmCfg, NotifyCfg, PromoteCfg, ReportCfg, ScheduleCfg

EVENTS = ("failed", "regressed", "promoted", "finished")


def report(r: Reader) -> ReportCfg:
    return ReportCfg(r.get("report", "enabled", "bool", default=True), r.get("report", "dir", "str", default="reports"),
                     r.get("report", "top_k", "int", default=5))


def promote(r: Reader) -> PromoteCfg:
    model_name = r.get("promote", "model_name", "str", default=None)
    if model_name is not None:
        r.errors += model_name_errors("promote.model_name", model_name)
    alias = r.get("promote", "alias", "str", default="champion")
    if isinstance(alias, str):
        r.errors += alias_errors("promote.alias", alias)
    return PromoteCfg(r.get("promote", "enabled", "bool", default=False), model_name, alias,
                      r.get("promote", "require_confirmed", "bool", default=False),
                      r.get("promote", "rule", "str", default="best_primary"))


def notify(r: Reader) -> NotifyCfg:
    url = r.get("notify", "webhook_url", "str", default=None)
    if isinstance(url, str) and not url.startswith(("http://", "https://")):
        r.errors.append("notify.webhook_url: must be an http(s):// URL (the value is not shown: it is a secret)")
    on = r.get("notify", "on", "list", default=list(EVENTS)) or []
    bad = [e for e in on if e not in EVENTS]
    if bad:
        r.errors.append(f"notify.on: unknown event(s) {', '.join(map(str, bad))}; choose from {', '.join(EVENTS)}")
    timeout = r.get("notify", "timeout_s", "num", default=2.0)
    if isinstance(timeout, int | float) and not 0 < timeout <= 10:
        r.errors.append(f"notify.timeout_s: must be within (0, 10] seconds (a webhook never delays a sweep "
                        f"for long), got {timeout}")
    return NotifyCfg(url, tuple(str(e) for e in on), float(timeout))


def confirm(r: Reader) -> ConfirmCfg:
    top_k = r.get("confirm", "top_k", "int", default=3)
    seeds = r.get("confirm", "seeds", "int", default=5)
    if isinstance(top_k, int) and top_k < 1:
        r.errors.append(f"confirm.top_k: must be >= 1, got {top_k}")
    if isinstance(seeds, int) and seeds < 2:
        r.errors.append(f"confirm.seeds: must be >= 2 (a confidence interval needs two runs), got {seeds}")
    return ConfirmCfg(r.get("confirm", "enabled", "bool", default=False), int(top_k or 3), int(seeds or 5))


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
