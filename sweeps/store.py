"""The sweep index: one JSON record per sweep under ``$SWEEPS_HOME/sweeps/``.

It is how ``list``, ``report``, ``resume``, ``extend``, ``promote`` and the scheduler find a sweep by id (or
``latest``) without asking Ray or MLflow. Records are written atomically (write + rename).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweeps import lease, paths
from sweeps.errors import BadInput

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,200}$")  # sweep ids name files: no path separators


@dataclass
class SweepRecord:
    sweep_id: str
    experiment: str
    created: float
    status: str  # running | finished | interrupted | failed
    storage_path: str
    experiment_dirs: list[str]
    tracking_uri: str
    mlflow_experiment_id: str = ""
    parent_run_id: str = ""
    overrides: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # redacted composed config
    digest: str = ""
    metric: str = ""
    mode: str = ""
    searcher: str = ""
    scheduler: str = ""
    best: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    report_dir: str | None = None
    schedule: str | None = None
    previous_sweep_id: str | None = None
    driver_pid: int | None = None
    slots: int | None = None
    driver_host: str | None = None  # with driver_pid, driver_token, driver_proc: who runs it (sweeps.lease)
    lease_expires: float | None = None
    # why the sweep ended early: "time_budget" / "resource_budget" / "stalled" / "metric_missing"
    stop_reason: str | None = None
    hours: dict[str, float | None] = field(default_factory=dict)  # CPU/GPU-hours used, and the budget
    confirm_dirs: list[str] = field(default_factory=list)  # the Tune experiments of `sweeps confirm`
    confirmed: list[dict[str, Any]] = field(default_factory=list)  # each configuration's interval, best first
    pareto: list[dict[str, Any]] = field(default_factory=list)  # multi-objective: every trial's point and rank
    driver_token: str = ""  # the driver's random token (empty in records of older versions)
    driver_proc: str = ""  # where driver_pid means something (sweeps.lease.Holder.proc)
    per_trial: dict[str, float] = field(default_factory=dict)  # what one trial holds (execution.plan.per_trial)
    listeners: str = ""  # where the sweep's processes listen (execution.loopback.listeners): a line of the report
    driver_peak_rss_mb: float | None = None  # the driver process's peak resident memory (its OS's figure)
    # the seconds sweep.time_budget_s counted, over every run (wall time less pauses with nothing running)
    running_s: float | None = None
    live_state: str = ""  # "paused" while an operator's pause holds the running sweep (sweeps pause)

    @property
    def counted_s(self) -> float:
        """The seconds the sweep's time budget counted over its runs so far (older records: their wall time)."""
        return float(self.running_s if self.running_s is not None else self.wall_s or 0.0)

    def owner_alive(self) -> bool:
        """Whether a driver (on any host) may still be running this sweep."""
        return self.status == "running" and lease.owner_alive(self.driver, self.lease_expires)

    def state_word(self) -> str:
        """The sweep's state for ``sweeps list``: a running sweep whose driver lives is "running (live)", or
        "paused (live)" while an operator's pause holds it (``live_state``, kept by its driver)."""
        if self.status != "running" or not self.owner_alive():
            return self.status
        return f"{'paused' if self.live_state == 'paused' else 'running'} (live)"

    @property
    def driver(self) -> lease.Holder:
        """The driver as a :class:`sweeps.lease.Holder`."""
        return lease.Holder(self.driver_host or "", self.driver_pid, self.driver_token, self.driver_proc)

    @property
    def experiment_dir(self) -> str:
        return self.experiment_dirs[0]


def new_sweep_id(experiment: str) -> str:
    """Stable, sortable, unique: ``<experiment>-<UTC yyyymmdd-hhmmss>-<4 hex>``."""
    return f"{experiment}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def _path(sweep_id: str) -> Path:
    return paths.index_dir() / f"{sweep_id}.json"


def save(rec: SweepRecord) -> None:
    folder = paths.index_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(rec), f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, _path(rec.sweep_id))


def update(sweep_id: str, **changes: Any) -> SweepRecord:
    """Change some fields of a record: read, change and write under a lock (the driver's heartbeat writes too)."""
    from filelock import FileLock

    folder = paths.index_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / f".{sweep_id}.lock")):
        rec = load(sweep_id)
        for k, v in changes.items():
            setattr(rec, k, v)
        save(rec)
    return rec


def all_records() -> list[SweepRecord]:
    folder = paths.index_dir()
    if not folder.is_dir():
        return []
    out = []
    for p in folder.glob("*.json"):
        if p.name.startswith(".") or paths.outside_home(p):
            continue  # a planted link is not a sweep (load() names it)
        try:
            out.append(SweepRecord(**json.loads(p.read_text())))
        except (ValueError, TypeError):
            continue  # a foreign or corrupt file is not a sweep
    return sorted(out, key=lambda r: r.created)


def load(sweep_id: str) -> SweepRecord:
    """The record for ``sweep_id`` (or ``latest``).

    Raises:
        BadInput: when no such sweep exists (lists the newest ids).
    """
    if sweep_id == "latest":
        records = all_records()
        if not records:
            raise BadInput(f"SWEEP_ID: no sweeps yet under {paths.index_dir()}; run one with "
                           f"`python -m sweeps run +experiment=quickstart`")
        return records[-1]
    p = _path(sweep_id) if ID.match(sweep_id or "") else None
    if p is None or not p.is_file():
        known = ", ".join(r.sweep_id for r in all_records()[-5:]) or "(none)"
        raise BadInput(f"SWEEP_ID: no sweep {sweep_id!r} under {paths.index_dir()}; recent: {known} "
                       f"(see `python -m sweeps list`)")
    if paths.outside_home(p):
        raise BadInput(f"SWEEP_ID: {paths.outside_home(p)}")
    try:
        return SweepRecord(**json.loads(p.read_text()))
    except (ValueError, TypeError) as exc:
        raise BadInput(f"SWEEP_ID: the index record {p} is unreadable ({exc}); move it away") from None


def latest_for(experiment: str, schedule: str | None = None, before: str | None = None) -> SweepRecord | None:
    """The newest finished sweep of an experiment (optionally of one schedule), other than ``before``."""
    for rec in reversed(all_records()):
        if rec.experiment != experiment or rec.sweep_id == before or rec.status != "finished":
            continue
        if schedule is not None and rec.schedule != schedule:
            continue
        return rec
    return None
