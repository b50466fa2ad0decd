"""One scheduled run: lock -> warm start -> sweep -> comparison -> regression check -> state file.

``python -m sweeps schedule run NAME`` (what cron and the systemd timer call) lands in :func:`run`.
Exit codes: 0 success, 1 the sweep failed, 2 bad input, 4 :class:`~sweeps.errors.Regressed`, 5
:class:`~sweeps.errors.Locked` (another run of the same schedule holds the lock), 130 interrupted.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sweeps import paths, schedule
from sweeps.errors import BadInput, Locked, Regressed, SweepsError
from sweeps.tracking import pid_alive

log = logging.getLogger(__name__)

BASIC_SEARCHERS = ("BasicVariantGenerator",)  # accept partial points; the others need every parameter


# --- the lock -----------------------------------------------------------------------------------------------


def _holder_text(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = "an unknown time"
    if isinstance(started, int | float):
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started))
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when}"


def _read_holder(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 65536)
    try:
        data = json.loads(raw.decode() or "{}")
        return data if isinstance(data, dict) else {}
    except ValueError:
        return {}


@contextmanager
def schedule_lock(name: str) -> Iterator[dict[str, Any]]:
    """Hold ``$SWEEPS_HOME/locks/<name>.lock`` (an ``flock``) while the body runs.

    The file holds JSON about the holder (pid, host, start time). The kernel drops an ``flock`` when its
    process dies, so a lock file left by a dead process is simply taken over (and said so).

    Raises:
        Locked: another live process holds it; the message names its pid and start time.
    """
    path = schedule.locks_dir() / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder: dict[str, Any] = {}
            for _ in range(10):  # the holder writes its JSON right after taking the lock
                holder = _read_holder(fd)
                if holder:
                    break
                time.sleep(0.05)
            raise Locked(f"schedule {name}: another run holds the lock ({_holder_text(holder)}; lock file "
                         f"{path}); this run exits without starting a sweep") from None
        old = _read_holder(fd)
        if old.get("pid"):
            gone = not pid_alive(int(old["pid"])) if old.get("host") == socket.gethostname() else True
            log.warning("schedule %s: taking over a stale lock left by %s (%s)", name, _holder_text(old),
                        "process is gone" if gone else "it no longer holds the lock")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "schedule": name}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        try:
            yield info
        finally:
            os.ftruncate(fd, 0)  # empty = released cleanly; the file stays (unlinking races with openers)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# --- warm start ---------------------------------------------------------------------------------------------


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
    from sweeps.results import load_records
    from sweeps.summary import collect

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

    from sweeps import tracking

    name = spec.promote.model_name or spec.sweep.name
    try:
        c = tracking.client(spec.tracking.uri)
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
    return ["++searcher.storage._target_=optuna.storages.RDBStorage",
            f"++searcher.storage.url='sqlite:///{db}'",
            f"++searcher.study_name={name}-{spec.digest()}"]


def night_seed(name: str, spec: Any) -> list[str]:
    """``sweep.seed + n`` for the schedule's n-th run: a fixed seed would redraw last night's configurations
    and spend tonight's budget on them again. The seed used is logged with the parent run."""
    from sweeps import store

    night = sum(1 for r in store.all_records() if r.schedule == name)
    return [f"sweep.seed={spec.sweep.seed + night}"] if night else []


# --- after the sweep ----------------------------------------------------------------------------------------


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


def write_comparison(prev: Any, rec: Any, out_dir: Path) -> Path:
    """The report helper's comparison when it exists, else a minimal Markdown table."""
    try:
        from sweeps import report_cli
    except ImportError:
        report_cli = None  # type: ignore[assignment]
    if report_cli is not None and hasattr(report_cli, "write_comparison"):
        return Path(report_cli.write_comparison(prev, rec, out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "comparison.md"
    a, b = prev.best or {}, rec.best or {}
    delta = ""
    if isinstance(a.get("value"), int | float) and isinstance(b.get("value"), int | float):
        delta = f"{b['value'] - a['value']:+.4f}"
    rows = [
        f"# {rec.sweep_id} vs the previous run {prev.sweep_id}",
        "",
        "| | previous | tonight |",
        "| --- | --- | --- |",
        f"| sweep | {prev.sweep_id} | {rec.sweep_id} |",
        f"| status | {prev.status} | {rec.status} |",
        f"| best {rec.metric} ({rec.mode}) | {a.get('value', '-')} | {b.get('value', '-')} "
        f"({delta or 'n/a'}) |",
        f"| best trial | {a.get('trial_id', '-')} | {b.get('trial_id', '-')} |",
        f"| best config | `{a.get('params', '-')}` | `{b.get('params', '-')}` |",
        f"| trials | {prev.counts.get('total', '-')} | {rec.counts.get('total', '-')} |",
        f"| wall time (s) | {prev.wall_s or 0:.1f} | {rec.wall_s or 0:.1f} |",
        "",
    ]
    path.write_text("\n".join(rows))
    return path


# --- the run ------------------------------------------------------------------------------------------------


def run(name: str, fired_at: float | None = None) -> int:
    """Run schedule ``name`` now, as cron does; with ``fired_at`` (guarded cron lines) only when due."""
    entry = schedule.load_entry(name)
    if fired_at is not None and entry.guarded and not schedule.is_due(entry.cron, entry.tz, fired_at):
        log.debug("schedule %s: not due at %s in %s", name, time.ctime(fired_at), entry.tz)
        return 0
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
    from sweeps import runner, store

    overrides = [*entry.overrides, f"++schedule.name={entry.name}"]
    spec = runner.prepare(overrides)
    tolerance = check_tolerance(spec.schedule.regression_tolerance)
    prev = store.latest_for(spec.sweep.name, schedule=entry.name)
    points = warm_points(prev, spec)
    extra = optuna_overrides(entry.name, spec) + night_seed(entry.name, spec)
    if extra:
        overrides += extra
        spec = runner.prepare(overrides)
    log.info("schedule %s: previous sweep %s; %d warm-start point(s) first", entry.name,
             prev.sweep_id if prev else "(none)", len(points))
    outcome = runner.execute(spec, overrides, schedule=entry.name, previous=prev.sweep_id if prev else None,
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
    _check_regression(entry.name, prev, rec, tolerance, info)
    log.info("schedule %s: sweep %s finished; best %s = %s", entry.name, rec.sweep_id, rec.metric,
             rec.best.get("value"))
    return 0, info


def _compare(prev: Any, rec: Any, spec: Any) -> str | None:
    base = Path(rec.report_dir) if rec.report_dir else Path(spec.report.dir) / rec.experiment / rec.sweep_id
    out_dir = base / "vs_previous"
    try:
        path = write_comparison(prev, rec, out_dir)
        log.info("schedule: comparison with %s in %s", prev.sweep_id, path)
        return str(path)
    except Exception as exc:  # a comparison failure must not fail the night
        log.warning("schedule: could not write the comparison with %s (%s)", prev.sweep_id, exc)
        return None


def _check_regression(name: str, prev: Any, rec: Any, tolerance: float | None, info: dict[str, Any]) -> None:
    if prev is None or prev.metric != rec.metric or prev.mode != rec.mode:
        return
    worse = regression((prev.best or {}).get("value"), (rec.best or {}).get("value"), rec.mode, tolerance)
    if worse is None or worse <= (tolerance or 0.0):
        return
    exc = Regressed(f"schedule {name}: best {rec.metric} {rec.best.get('value'):.4f} is {worse:.4f} worse "
                    f"than the previous run's {prev.best.get('value'):.4f} ({prev.sweep_id}); "
                    f"schedule.regression_tolerance={tolerance}")
    exc.state = {**info, "status": "regressed"}  # type: ignore[attr-defined]
    raise exc
