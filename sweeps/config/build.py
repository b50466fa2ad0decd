"""``build_spec``: the single validation pass from the composed config to a frozen :class:`SweepSpec`.

Every section validator runs and records its problems; then the rules that span sections; one
:class:`~sweeps.errors.BadInput` names every bad key, its value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeps import paths
from sweeps.config import limits, redaction, security, trust
from sweeps.config.reader import Reader
from sweeps.config.sections import objectives, outputs, runtime, scheduler, script, search, sweep, trainable
from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput

SECTIONS = ("sweep", "trainable", "search_space", "searcher", "scheduler", "tracking", "cluster", "storage",
            "checkpoint", "failure", "report", "promote", "security", "schedule", "notify", "confirm")


def build_spec(cfg: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> SweepSpec:
    """Validate the composed, resolved config and freeze it into a :class:`SweepSpec`.

    Args:
        cfg: the plain dict from :func:`sweeps.config.compose.compose`.
        defaults: values for unset paths (``tracking_uri``, ``storage_path``), from :mod:`sweeps.paths`.

    Raises:
        BadInput: with every problem found, each naming its key.
    """
    r = Reader(cfg)
    defaults = defaults or {}
    found: set[str] = set()
    redaction.redact(cfg, found)  # secret-named values, URI passwords: scrubbed from free text from now on
    redaction.remember(found)
    r.errors += limits.config_errors(cfg)
    if r.errors:
        raise BadInput(*r.errors)  # oversized or control characters: nothing else is read
    r.errors += runtime.unknown_sections(cfg, SECTIONS)
    from_files, from_env = outputs.allowed_targets(r), trust.env_targets()
    r.errors += security.extra_errors(from_files) + security.extra_errors(from_env, trust.ENV)
    # a refused entry widens nothing, not even for the checks below (nothing outside the list is imported)
    allowed = tuple(dict.fromkeys(e for e in (*from_files, *from_env) if not security.extra_errors([e])))
    sweep_cfg = sweep.parse(r)
    trainable_cfg = trainable.parse(r, allowed)
    r.errors += trainable.metric_errors(sweep_cfg.metric, trainable_cfg)
    space_cfg = search.parse_space(r)
    r.errors += script.space_errors(trainable_cfg.script, space_cfg, metrics=trainable_cfg.metrics)
    searcher = search.parse_target(r, "searcher")
    sched = search.parse_target(r, "scheduler")
    r.errors += search.searcher_errors(searcher, space_cfg)
    r.errors += scheduler.scheduler_errors(sched, trainable_cfg, space_cfg)
    promote_cfg = outputs.promote(r)
    r.errors += objectives.cross_errors(sweep_cfg, trainable_cfg, searcher, promote_cfg.rule)
    spec = SweepSpec(
        sweep=sweep_cfg, trainable=trainable_cfg, space=space_cfg, searcher=searcher, scheduler=sched,
        tracking=runtime.tracking(r, defaults.get("tracking_uri") or paths.default_tracking_uri(), sweep_cfg.name),
        cluster=runtime.cluster(r),
        storage_path=runtime.storage(r, defaults.get("storage_path") or str(paths.default_storage())),
        checkpoint_num_to_keep=runtime.checkpoint(r), failure=runtime.failure(r), report=outputs.report(r),
        promote=promote_cfg, schedule=outputs.schedule(r), allowed_targets=allowed, raw=dict(cfg),
        notify=outputs.notify(r), confirm=outputs.confirm(r),
    )
    r.errors += security.check_targets(cfg, allowed)
    if spec.promote.enabled and spec.promote.require_confirmed and not spec.confirm.enabled:
        r.errors.append("promote.require_confirmed: auto-promotion (promote.enabled=true) of a confirmed winner "
                        "needs confirm.enabled=true; set it, or promote later with `python -m sweeps promote "
                        "SWEEP_ID --confirmed` after `sweeps confirm`")
    if r.errors:
        raise BadInput(*r.errors)
    return spec
