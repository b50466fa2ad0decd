"""The text a schedule installs: its crontab lines and its systemd user service + timer (pure)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sweeps.ops.schedule import Entry

DOW = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


def _list(values: list[Any], names: Iterable[str] | None = None) -> str:
    if values == ["*"]:
        return "*"
    if names is not None:
        table = list(names)
        return ",".join(table[int(v) % 7] for v in values)
    return ",".join(f"{int(v):02d}" for v in values)


def oncalendar(expr: str, tz: str | None) -> list[str]:
    """``OnCalendar=`` values equivalent to the cron expression (one or two: cron ORs day-of-month and
    day-of-week when both are restricted, systemd ANDs them, so that case becomes two timers' worth).

    Example: ``oncalendar("30 2 * * 1-5", "Europe/Berlin") == ["Mon,Tue,Wed,Thu,Fri *-*-* 02:30:00
    Europe/Berlin"]``.
    """
    from croniter import croniter

    minute, hour, dom, month, dow = croniter(expr).expanded
    dow = sorted({int(d) % 7 for d in dow}) if dow != ["*"] else dow
    suffix = f" {tz}" if tz else ""
    time_part = f"{_list(hour)}:{_list(minute)}:00"

    def one(dom_: list[Any], dow_: list[Any]) -> str:
        days = f"{_list(dow_, DOW)} " if dow_ != ["*"] else ""
        return f"{days}*-{_list(month)}-{_list(dom_)} {time_part}{suffix}"

    if dom != ["*"] and dow != ["*"]:
        return [one(dom, ["*"]), one(["*"], dow)]
    return [one(dom, dow)]


def unit_name(name: str) -> str:
    return f"sweeps-{name}"


def systemd_units(entry: Entry, python: str) -> dict[str, str]:
    """``{filename: text}`` for the user service and timer of ``entry``."""
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    env = " ".join(q(f"{k}={v}") for k, v in entry.env.items())
    log = str(entry.log_path)
    service = "\n".join([
        "[Unit]",
        f"Description=sweeps schedule {entry.name} (SWEEPS_HOME={entry.home})",
        "",
        "[Service]",
        "Type=oneshot",
        f"WorkingDirectory={entry.project}",
        f"Environment={env}",
        f"ExecStartPre=/bin/mkdir -p {q(str(entry.log_path.parent))}",
        f"ExecStart={q(python)} -m sweeps schedule run {entry.name}",
        f"StandardOutput=append:{log}",
        f"StandardError=append:{log}",
        "",
    ])
    timer = "\n".join([
        "[Unit]",
        f"Description=sweeps schedule {entry.name}: cron {entry.cron!r}"
        + (f" in {entry.tz}" if entry.tz else ""),
        "",
        "[Timer]",
        *(f"OnCalendar={c}" for c in oncalendar(entry.cron, entry.tz)),
        f"Unit={unit_name(entry.name)}.service",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ])
    return {f"{unit_name(entry.name)}.service": service, f"{unit_name(entry.name)}.timer": timer}


def systemd_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def tag(name: str, home: str) -> str:
    """The comment that ends every crontab line of one schedule (``%`` escaped as cron needs)."""
    return f"# sweeps:{name} home={home}".replace("%", "\\%")


def command_line(entry: Entry, python: str) -> str:
    """The shell command cron runs: cd to the project, set SWEEPS_HOME, run, append to the log.

    Only ``SWEEPS_HOME`` is on the line (it finds the stored entry): ``schedule run`` applies the rest of
    ``entry.env`` (PATH, MLFLOW_TRACKING_URI, ...) itself, so a long PATH cannot take the line past the
    ~1,000 characters Vixie cron keeps."""
    env = f"SWEEPS_HOME={shlex.quote(entry.home)}"
    fired = ' --fired-at "$(date +%s)"' if entry.guarded else ""
    log = shlex.quote(str(entry.log_path))
    return (f"cd {shlex.quote(entry.project)} && mkdir -p {shlex.quote(str(entry.log_path.parent))} && "
            f"{env} {shlex.quote(python)} -m sweeps schedule run {entry.name}{fired} >> {log} 2>&1")


def crontab_block(entry: Entry, python: str, fields: str) -> list[str]:
    t = tag(entry.name, entry.home)
    where = f" in {entry.tz}" if entry.tz else ""
    how = "; fires hourly, runs only when due (cron ignores CRON_TZ)" if entry.guarded else ""
    header = (f"# sweeps schedule {entry.name}: cron '{entry.cron}'{where}{how}; remove with "
              f"`python -m sweeps schedule remove {entry.name}`").replace("%", "\\%")
    return [f"{header} {t}", f"{fields} {command_line(entry, python).replace('%', chr(92) + '%')} {t}"]


def strip_block(text: str, name: str, home: str) -> tuple[str, int]:
    """The crontab without this schedule's lines, and how many were removed. Other lines stay as they are."""
    t = tag(name, home)
    kept, removed = [], 0
    for line in text.splitlines():
        if line.rstrip().endswith(t):
            removed += 1
        else:
            kept.append(line)
    return ("\n".join(kept) + "\n") if kept else "", removed


def with_block(text: str, block: list[str]) -> str:
    base = text if not text or text.endswith("\n") else text + "\n"
    return base + "\n".join(block) + "\n"
