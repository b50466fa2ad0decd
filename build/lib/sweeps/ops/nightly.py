"""One scheduled run: lock -> warm start -> sweep -> comparison -> regression check -> state file.

``python -m sweeps schedule run NAME`` (what cron and the systemd timer call) lands in :func:`run`.
Exit codes: 0 success, 1 the sweep failed, 2 bad input, 4 :class:`~sweeps.errors.Regressed`, 5
:class:`~sweeps.errors.Locked` (another run of the same schedule holds the lock), 130 interrupted.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from sweeps import paths
from sweeps.errors import BadInput, Regressed, SweepsError
from sweeps.ops import cron, schedule
from sweeps.ops.lock import schedule_lock
from sweeps.ops.warmstart import night_seed, optuna_overrides, warm_points

log = logging.getLogger(__name__)


def regression(prev_best: float | None, best: float | None, mode: str, tolerance: float | None
               ) -> float | None:
    """How much worse ``best`` is than ``prev_best`` (> 0 is worse); None when there is nothing to check."""
    if tolerance is None or prev_best is None or best is None:
        return None
    if not (math.isfinite(prev_best) and math.isfinite(best)):
        return None
    return prev_best - best if mode == "max" else best - prev_best


def check_tolerance(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BadInput(f"schedule.regression_tolerance: must be a number >= 0 (absolute, in the metric's "
                       f"units) or null, got {value!r}")
    return float(value)


def run(name: str, fired_at: float | None = None) -> int:
    """Run schedule ``name`` now, as cron does; with ``fired_at`` (guarded cron lines) only when due."""
    entry = schedule.load_entry(name)
    if fired_at is not None and entry.guarded and not cron.is_due(entry.cron, entry.tz, fired_at):
        log.debug("schedule %s: not due at %s in %s", name, time.ctime(fired_at), entry.tz)
        return 0
    if entry.kind == "cron":  # the crontab line set only SWEEPS_HOME; systemd units and outside schedulers
        schedule.apply_env(entry)  # set their own environment
    os.environ["SWEEPS_HOME"] = str(paths.home())  # absolute: the chdir below must not move it
    if Path(entry.project).is_dir() and Path.cwd() != Path(entry.project):
        os.chdir(entry.project)  # reports/ and logs/ are relative to the project, as under cron
    with schedule_lock(name) as lock:
        log.info("schedule %s: run started at %s (pid %d)", name, time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                 os.getpid())
        state: dict[str, Any] = {"started": lock["started"], "pid": os.getpid(), "host": lock["host"]}
        try:
            code, info = _run_locked(entry)
        except SweepsError as exc:
            _record(name, state, {"status": "error", **getattr(exc, "state", {})}, exc.exit_code, str(exc))
            raise
        except BaseException as exc:
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
            _record(name, state, {"status": "error"}, code, f"{type(exc).__name__}: {exc}")
            raise
        _record(name, state, info, code, info.get("message"))
        return code


def _record(name: str, state: dict[str, Any], info: dict[str, Any], code: int, message: str | None) -> None:
    schedule.write_state(name, **{**state, **info, "exit_code": code, "message": message,
                                  "finished": time.time()})


def _run_locked(entry: schedule.Entry) -> tuple[int, dict[str, Any]]:
    from sweeps import store
    from sweeps.ops.prepare import prepare
    from sweeps.ops.run import execute

    overrides = [*entry.overrides, f"++schedule.name={entry.name}"]
    spec = prepare(overrides)
    tolerance = check_tolerance(spec.schedule.regression_tolerance)
    prev = store.latest_for(spec.sweep.name, schedule=entry.name)
    points = warm_points(prev, spec)
    extra = optuna_overrides(entry.name, spec) + night_seed(entry.name, spec)
    if extra:
        overrides += extra
        spec = prepare(overrides)
    log.info("schedule %s: previous sweep %s; %d warm-start point(s) first", entry.name,
             prev.sweep_id if prev else "(none)", len(points))
    os.environ.setdefault("SWEEPS_LAUNCHED_BY", "schedule")  # what `sweeps status` says launched it
    outcome = execute(spec, overrides, schedule=entry.name, previous=prev.sweep_id if prev else None,
                             points=points or None)
    rec = outcome.record
    info: dict[str, Any] = {"sweep_id": rec.sweep_id, "status": rec.status, "best": rec.best,
                            "previous_sweep_id": rec.previous_sweep_id, "warm_start_points": points}
    if prev is not None:
        info["comparison"] = _compare(prev, rec, spec)
    if outcome.interrupted:
        return 130, info
    if rec.status != "finished" or outcome.summary.best is None:
        info["message"] = ("the sweep failed" if rec.status != "finished"
                           else "no trial reported a finite metric")
        log.error("schedule %s: %s (sweep %s)", entry.name, info["message"], rec.sweep_id)
        return 1, info
    if outcome.promotion:
        info["promotion"] = outcome.promotion
    try:
        _check_regression(entry.name, prev, rec, tolerance, info)
    except Regressed as exc:
        from sweeps.ops import notify

        detail = {"previous_sweep_id": prev.sweep_id if prev else None}
        notify.send(spec.notify, "regressed", notify.payload("regressed", rec, text=f"sweeps: {exc}", detail=detail))
        raise
    log.info("schedule %s: sweep %s finished; best %s = %s", entry.name, rec.sweep_id, rec.metric,
             rec.best.get("value"))
    return 0, info


def _compare(prev: Any, rec: Any, spec: Any) -> str | None:
    base = Path(rec.report_dir) if rec.report_dir else Path(spec.report.dir) / rec.experiment / rec.sweep_id
    out_dir = base / "vs_previous"
    try:
        from sweeps.reports.compare import write_comparison

        path = write_comparison(prev, rec, out_dir)
        log.info("schedule: comparison with %s in %s", prev.sweep_id, path)
        return str(path)
    except Exception as exc:  # a comparison failure must not fail the night
        log.warning("schedule: could not write the comparison with %s (%s)", prev.sweep_id, exc)
        return None


def _front_regressed(prev: Any, rec: Any) -> str | None:
    """Multi-objective: the new front is dominated by the previous run's champion (its best primary point)."""
    from sweeps.config.stored import read
    from sweeps.reports.pareto import dominates

    objs = read(rec.config).objectives
    old = [p for p in prev.pareto if p["rank"] == 1 and p["feasible"]]
    new = [p for p in rec.pareto if p["rank"] == 1 and p["feasible"]]
    if not objs or not old:
        return None
    sign = 1.0 if objs[0].mode == "max" else -1.0
    champion = max(old, key=lambda p: sign * p["values"][0])
    modes = [o.mode for o in objs]
    if new and not all(dominates(champion["values"], p["values"], modes) for p in new):
        return None
    return (f"the new front ({len(new)} trial(s)) is dominated by the previous run's champion "
            f"{champion['trial_id']} {dict(zip([o.metric for o in objs], champion['values'], strict=True))}")


def _check_regression(name: str, prev: Any, rec: Any, tolerance: float | None, info: dict[str, Any]) -> None:
    if prev is None or prev.metric != rec.metric or prev.mode != rec.mode:
        return
    if getattr(rec, "pareto", None) and getattr(prev, "pareto", None):
        why = _front_regressed(prev, rec)
        if why:
            exc = Regressed(f"schedule {name}: {why} ({prev.sweep_id})")
            exc.state = {**info, "status": "regressed"}  # type: ignore[attr-defined]
            raise exc
        return
    worse = regression((prev.best or {}).get("value"), (rec.best or {}).get("value"), rec.mode, tolerance)
    if worse is None or worse <= (tolerance or 0.0):
        return
    exc = Regressed(f"schedule {name}: best {rec.metric} {rec.best.get('value'):.4f} is {worse:.4f} worse "
                    f"than the previous run's {prev.best.get('value'):.4f} ({prev.sweep_id}); "
                    f"schedule.regression_tolerance={tolerance}")
    exc.state = {**info, "status": "regressed"}  # type: ignore[attr-defined]
    raise exc
