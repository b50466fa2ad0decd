"""Schedules: cron + time-zone validation, fire times, entries on disk, crontab/systemd text. Mostly pure.

A schedule entry is one JSON file, ``$SWEEPS_HOME/schedules/<name>.json``, holding the Hydra overrides of the
sweep, the cron expression, the time zone and where it is installed (crontab or a systemd user timer). The
I/O against ``crontab`` and ``systemctl`` lives in :mod:`sweeps.schedule_cli`; the run itself in
:mod:`sweeps.nightly`.

Time semantics (PEP 495, the same for ``list``, the cron guard and systemd): a cron expression is read in its
time zone's wall clock. A wall time skipped by a DST jump (02:30 on the spring-forward night in
Europe/Berlin) fires once, right after the jump (03:30 local); a wall time that happens twice (autumn) fires
once, at its first occurrence.

Time zones and cron: Debian's cron (Vixie cron 3.0) ignores ``CRON_TZ``/``TZ`` and fires in the system zone.
When ``--tz`` differs from the system zone the crontab line therefore fires every hour at the matching
minute(s) and passes ``--fired-at $(date +%s)``; ``schedule run`` then starts the sweep only when that minute
is a fire time in the requested zone (:func:`is_due`). Cheap (a 0.2 s check per hour), exact across DST
changes of either zone, and portable to every cron.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from sweeps import paths
from sweeps.errors import BadInput

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
# What every cron understands: numbers, names, * , - /. Not croniter's extras (L W # ? H, seconds, years).
FIELD_RE = re.compile(r"^[0-9A-Za-z*,/-]+$")
NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
         "sun", "mon", "tue", "wed", "thu", "fri", "sat")
NEVER_YEARS = 5  # an expression with no fire time within this many years "never fires"
FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
DOW = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
KINDS = ("cron", "systemd", "external")


@dataclass
class Entry:
    """One schedule, as stored in ``$SWEEPS_HOME/schedules/<name>.json``."""

    name: str
    overrides: list[str]
    cron: str
    tz: str | None
    kind: str  # cron | systemd | external (recorded only; e.g. a Kubernetes CronJob runs it)
    project: str  # the folder the run cds into (reports/, logs/, conf/)
    home: str  # $SWEEPS_HOME when it was added
    created: float = field(default_factory=time.time)
    env: dict[str, str] = field(default_factory=dict)
    guarded: bool = False  # cron fires hourly and `schedule run --fired-at` checks the time zone

    @property
    def log_path(self) -> Path:
        return Path(self.project) / "logs" / "schedules" / f"{self.name}.log"


# --- validation ---------------------------------------------------------------------------------------------


def validate_name(name: str | None) -> str:
    if not name:
        raise BadInput("NAME: required, e.g. `python -m sweeps schedule remove nightly`")
    if not NAME_RE.match(name):
        raise BadInput(f"NAME: {name!r} is not a valid schedule name; use 1-64 letters, digits, _ or -")
    return name


def validate_cron(expr: str | None) -> str:
    """The expression as 5 cron fields (macros such as ``@daily`` expanded).

    Raises:
        BadInput: naming ``--cron`` for anything a standard cron would not run, or that never fires.
    """
    from croniter import CroniterBadCronError, croniter

    text = " ".join((expr or "").split())
    allowed = "5 fields 'minute hour day-of-month month day-of-week' (e.g. '0 2 * * *') or @daily/@hourly/..."
    if not text:
        raise BadInput(f"--cron: required; give {allowed}")
    text = MACROS.get(text.lower(), text)
    fields = text.split(" ")
    if text.startswith("@") or len(fields) != 5:
        raise BadInput(f"--cron: {expr!r} is not a cron expression; give {allowed}")
    for fname, value in zip(FIELD_NAMES, fields, strict=True):
        words = re.findall(r"[A-Za-z]+", value)
        if not FIELD_RE.match(value) or any(w.lower() not in NAMES for w in words):
            raise BadInput(f"--cron: {expr!r}: {fname} field {value!r} is not valid; use numbers, names "
                           f"(jan, mon, ...), '*', ranges a-b, lists a,b and steps */n")
    try:
        croniter(text)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise BadInput(f"--cron: {expr!r} is not valid ({exc}); give {allowed}") from None
    return text


def validate_tz(tz: str | None) -> ZoneInfo | None:
    """``None`` for the system zone; else the zone. Raises BadInput naming ``--tz`` for unknown zones."""
    if tz is None:
        return None
    try:
        if not tz or tz.startswith("/") or ".." in tz:
            raise ValueError(tz)
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        import difflib

        close = difflib.get_close_matches(tz, sorted(available_timezones()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise BadInput(f"--tz: unknown time zone {tz!r}{hint} (IANA names such as Europe/Berlin, "
                       f"America/New_York, UTC)") from None


def check_fires(expr: str, tz: str | None, start: datetime | None = None) -> datetime:
    """The first fire time; BadInput naming ``--cron`` when there is none within :data:`NEVER_YEARS` years."""
    fires = next_fires(expr, tz, start or datetime.now(UTC), 1)
    if not fires:
        raise BadInput(f"--cron: {expr!r} never fires (no matching date within {NEVER_YEARS} years, e.g. "
                       f"February 30); check the day-of-month and month fields")
    return fires[0]


# --- fire times ---------------------------------------------------------------------------------------------


def zone(tz: str | None) -> ZoneInfo | timezone:
    """The named zone, or the system zone (what cron uses: /etc/localtime) when ``tz`` is None."""
    if tz:
        return ZoneInfo(tz)
    return system_zone()


def system_zone() -> ZoneInfo | timezone:
    try:
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        return datetime.now().astimezone().tzinfo or UTC  # type: ignore[return-value]


def next_fires(expr: str, tz: str | None, start: datetime, n: int = 3) -> list[datetime]:
    """The next ``n`` fire times strictly after ``start`` (aware datetimes in the schedule's zone).

    Searches :data:`NEVER_YEARS` years ahead; returns fewer than ``n`` when the expression fires less often.
    """
    from croniter import CroniterBadDateError, croniter

    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    z = zone(tz)
    wall = start.astimezone(z).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=3)
    limit = start + timedelta(days=366 * NEVER_YEARS)
    it = croniter(expr, wall, day_or=True)
    every_hour = it.expanded[1] == ["*"]
    out: list[datetime] = []
    while len(out) < n:
        try:
            naive = it.get_next(datetime)
        except CroniterBadDateError:
            break
        for utc in _instants(naive, z, every_hour):
            if utc > limit:
                return out
            if utc > start and len(out) < n and all(utc != o.astimezone(UTC) for o in out):
                out.append(utc.astimezone(z))
    return out


def _instants(naive: datetime, z: ZoneInfo | timezone, every_hour: bool) -> list[datetime]:
    """The UTC instants of one wall-clock fire time (PEP 495: a skipped time shifts forward by the gap).

    A repeated (autumn) wall time fires once, at its first occurrence, except for jobs whose hour field is
    ``*``, which fire at both (as Vixie cron does).
    """
    first = naive.replace(tzinfo=z, fold=0).astimezone(UTC)
    second = naive.replace(tzinfo=z, fold=1).astimezone(UTC)
    repeated = first != second and all(
        t.astimezone(z).replace(tzinfo=None) == naive for t in (first, second))
    return [first, second] if repeated and every_hour else [first]


def is_due(expr: str, tz: str | None, fired_at: float) -> bool:
    """Whether the minute that contains ``fired_at`` (unix seconds) is a fire time of the schedule."""
    slot = datetime.fromtimestamp(fired_at - fired_at % 60, UTC)
    nxt = next_fires(expr, tz, slot - timedelta(seconds=1), 1)
    return bool(nxt) and nxt[0].astimezone(UTC) == slot


def _offsets(z: ZoneInfo | timezone, start: datetime, years: int = 2) -> list[timedelta]:
    out = []
    t = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    for h in range(0, 24 * 366 * years, 3):  # offsets change for weeks, never for under 3 hours
        off = (t + timedelta(hours=h)).astimezone(z).utcoffset()
        out.append(off or timedelta(0))
    return out


def same_zone(tz: str | None, start: datetime) -> bool:
    """True when ``tz`` has the system zone's UTC offset at every hour of the next two years."""
    if tz is None:
        return True
    return _offsets(ZoneInfo(tz), start) == _offsets(system_zone(), start)


def cron_fields(expr: str, tz: str | None, start: datetime) -> tuple[str, bool]:
    """The 5 schedule fields of the crontab line and whether the run must check :func:`is_due`.

    In the system zone: the expression itself. In another zone: the same minutes shifted by the zones'
    offset difference (e.g. +30 for Asia/Kolkata against UTC), every hour, guarded.
    """
    from croniter import croniter

    if same_zone(tz, start):
        return expr, False
    assert tz is not None  # same_zone() is True for None
    shifts = {int(((s - t).total_seconds() // 60) % 60)
              for s, t in zip(_offsets(system_zone(), start), _offsets(ZoneInfo(tz), start), strict=True)}
    minutes = croniter(expr).expanded[0]
    if minutes == ["*"]:
        return "* * * * *", True
    cron_minutes = sorted({(int(m) + d) % 60 for m in minutes for d in shifts})
    return f"{','.join(map(str, cron_minutes))} * * * *", True


# --- systemd ------------------------------------------------------------------------------------------------


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


# --- crontab text -------------------------------------------------------------------------------------------


def tag(name: str, home: str) -> str:
    """The comment that ends every crontab line of one schedule (``%`` escaped as cron needs)."""
    return f"# sweeps:{name} home={home}".replace("%", "\\%")


def command_line(entry: Entry, python: str) -> str:
    """The shell command cron runs: cd to the project, set the environment, run, append to the log."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in entry.env.items())
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


# --- entries and state on disk ------------------------------------------------------------------------------


def schedules_dir() -> Path:
    return paths.home() / "schedules"


def locks_dir() -> Path:
    return paths.home() / "locks"


def entry_path(name: str) -> Path:
    return schedules_dir() / f"{name}.json"


def state_path(name: str) -> Path:
    return schedules_dir() / f"{name}.state.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


def save_entry(entry: Entry) -> Path:
    _write_json(entry_path(entry.name), asdict(entry))
    return entry_path(entry.name)


def names() -> list[str]:
    folder = schedules_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json")
                  if not p.name.startswith(".tmp-") and not p.name.endswith(".state.json"))


def load_entry(name: str) -> Entry:
    """The entry; BadInput naming NAME and listing the known schedules when there is none."""
    path = entry_path(name)
    if not NAME_RE.match(name or "") or not path.is_file():
        known = ", ".join(names()) or ("(none; add one with `python -m sweeps schedule add NAME "
                                       "+experiment=X --cron '0 2 * * *'`)")
        raise BadInput(f"NAME: no schedule {name!r} under {schedules_dir()}; schedules: {known}")
    return Entry(**json.loads(path.read_text()))


def entries() -> list[Entry]:
    out = []
    for n in names():
        try:
            out.append(load_entry(n))
        except (BadInput, TypeError, ValueError):
            continue  # a foreign or corrupt file is not a schedule
    return out


def delete_entry(name: str) -> None:
    entry_path(name).unlink(missing_ok=True)
    state_path(name).unlink(missing_ok=True)


def write_state(name: str, **state: Any) -> None:
    """The last run's outcome (sweep id, status, exit code...), for ``schedule list``."""
    _write_json(state_path(name), {"name": name, "written": time.time(), **state})


def read_state(name: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(state_path(name).read_text())
        return data
    except (OSError, ValueError):
        return None


def carried_env() -> dict[str, str]:
    """What the scheduled run needs from today's environment: SWEEPS_HOME (absolute), PATH, and the
    optional settings that change where things go."""
    env = {"SWEEPS_HOME": str(paths.home())}
    for key in ("SWEEPS_CONF_DIR", "RAY_TMPDIR", "MLFLOW_TRACKING_URI"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    seen: list[str] = []
    for part in os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep):
        if part and part not in seen:
            seen.append(part)
    env["PATH"] = os.pathsep.join(seen)
    return env
