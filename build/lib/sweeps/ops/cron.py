"""Cron expressions and time zones: validation and fire times (pure).

Time semantics (PEP 495, the same for ``schedule list``, the cron guard and systemd): a cron expression is read
in its time zone's wall clock. A wall time skipped by a DST jump (02:30 on the spring-forward night in
Europe/Berlin) fires once, right after the jump (03:30 local); a wall time that happens twice (autumn) fires
once, at its first occurrence.

Time zones and cron: Debian's cron (Vixie cron 3.0) ignores ``CRON_TZ``/``TZ`` and fires in the system zone.
When ``--tz`` differs from the system zone the crontab line therefore fires every hour at the matching
minute(s) and passes ``--fired-at $(date +%s)``; ``schedule run`` then starts the sweep only when that minute
is a fire time in the requested zone (:func:`is_due`). Cheap (a 0.2 s check per hour), exact across DST
changes of either zone, and portable to every cron.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from sweeps.errors import BadInput

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
