"""Installing a schedule: the user's crontab (``crontab -l`` / ``crontab -``, other lines untouched) or a
systemd user timer under ``~/.config/systemd/user``."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sweeps import paths
from sweeps.errors import BadInput, SweepsError
from sweeps.ops import cron, schedule, units

log = logging.getLogger(__name__)


CRON_LINE_MAX = 990  # Vixie cron truncates longer command lines (MAX_COMMAND 1000)


@contextmanager
def _crontab_lock() -> Iterator[None]:
    """One read-modify-write of this user's crontab at a time."""
    import fcntl

    path = Path(tempfile.gettempdir()) / f"sweeps-crontab-{os.getuid()}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _crontab_bin() -> str:
    found = shutil.which("crontab")
    if not found:
        raise BadInput("schedule: `crontab` is not installed (Debian/Ubuntu: apt-get install cron; Fedora: "
                       "dnf install cronie); or use --systemd for a systemd user timer")
    return found


def read_crontab() -> str:
    proc = subprocess.run([_crontab_bin(), "-l"], capture_output=True, text=True, timeout=30)
    if proc.returncode == 0:
        return proc.stdout
    if "no crontab" in proc.stderr.lower():
        return ""
    raise SweepsError(f"schedule: `crontab -l` failed: {proc.stderr.strip()}")


def write_crontab(text: str) -> None:
    proc = subprocess.run([_crontab_bin(), "-"], input=text, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise SweepsError(f"schedule: `crontab -` refused the new crontab: {proc.stderr.strip()}")


def install_cron(entry: schedule.Entry, fields: str) -> str:
    block = units.crontab_block(entry, sys.executable, fields)
    if len(block[1]) > CRON_LINE_MAX:
        raise BadInput(f"schedule add: the crontab line would be {len(block[1])} characters (cron cuts at "
                       f"{CRON_LINE_MAX}); run `schedule add` from a shorter project path or with a shorter "
                       f"SWEEPS_HOME, or use --systemd")
    with _crontab_lock():
        current, _ = units.strip_block(read_crontab(), entry.name, entry.home)
        write_crontab(units.with_block(current, block))
    log.debug("crontab line: %s", block[1])
    return "the crontab" + (" (hourly, acting only when due in the zone)" if entry.guarded else "")


def remove_cron(entry: schedule.Entry) -> int:
    with _crontab_lock():
        text, removed = units.strip_block(read_crontab(), entry.name, entry.home)
        if removed and text.strip():
            write_crontab(text)
        elif removed:
            _drop_crontab()
    return removed


def _drop_crontab() -> None:
    """Nothing left: remove the crontab rather than install an empty one (as it was before `add`)."""
    proc = subprocess.run([_crontab_bin(), "-r"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 and "no crontab" not in proc.stderr.lower():
        raise SweepsError(f"schedule: `crontab -r` failed: {proc.stderr.strip()}")


def _systemctl(*args: str, quiet: bool = False) -> bool:
    exe = shutil.which("systemctl")
    if not exe:
        return False
    try:
        proc = subprocess.run([exe, "--user", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("systemctl --user %s: %s", " ".join(args), exc)
        return False
    if proc.returncode != 0:
        (log.debug if quiet else log.warning)("systemctl --user %s failed: %s", " ".join(args),
                                              proc.stderr.strip() or proc.returncode)
    return proc.returncode == 0


def install_systemd(entry: schedule.Entry) -> str:
    folder = units.systemd_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for fname, text in units.systemd_units(entry, sys.executable).items():
        (folder / fname).write_text(text)
    timer = f"{units.unit_name(entry.name)}.timer"
    if _systemctl("daemon-reload") and _systemctl("enable", "--now", timer):
        return f"{folder} (timer {timer} enabled)"
    log.warning("schedule %s: unit files written, but the timer is not active; enable it with "
                "`systemctl --user daemon-reload && systemctl --user enable --now %s`", entry.name, timer)
    return f"{folder} (not yet enabled)"


def remove_systemd(entry: schedule.Entry) -> int:
    timer = f"{units.unit_name(entry.name)}.timer"
    _systemctl("disable", "--now", timer, quiet=True)
    removed = 0
    for fname in (f"{units.unit_name(entry.name)}.service", timer):
        path = units.systemd_dir() / fname
        if path.is_file():
            path.unlink()
            removed += 1
    _systemctl("daemon-reload", quiet=True)
    return removed


def uninstall(entry: schedule.Entry) -> int:
    if entry.kind == "external":
        return 0
    return remove_systemd(entry) if entry.kind == "systemd" else remove_cron(entry)


def installed(entry: schedule.Entry, crontab: str | None) -> str:
    if entry.kind == "external":
        return "not installed here (an external scheduler runs it)"
    if entry.kind == "systemd":
        ok = (units.systemd_dir() / f"{units.unit_name(entry.name)}.timer").is_file()
        return "systemd user timer" if ok else "MISSING: the systemd timer file is gone"
    if crontab is None:
        return "crontab (cannot read it)"
    _, n = units.strip_block(crontab, entry.name, entry.home)
    return "crontab" if n else "MISSING from the crontab (re-add with --replace)"


@dataclass(frozen=True)
class Added:
    """A schedule that ``add`` recorded and installed."""

    entry: schedule.Entry
    sweep_name: str
    where: str
    fires: list[datetime]


def _refuse_stored_secrets(name: str, overrides: Sequence[str]) -> None:
    """A schedule's overrides and environment are stored in plain files: no literal secret may be among them."""
    from sweeps.config import redaction

    errors = [f"{o.split('=', 1)[0].lstrip('+~')}: a schedule stores its overrides in {schedule.entry_path(name)}; "
              f"pass the secret as '{o.split('=', 1)[0]}=${{oc.env:VAR}}' and set VAR where the schedule runs"
              for o, r in zip(overrides, redaction.redact_overrides(overrides), strict=True) if o != r]
    if redaction.uri_passwords(os.environ.get("MLFLOW_TRACKING_URI", "")):
        errors.append("MLFLOW_TRACKING_URI: it carries a password, and a schedule stores its environment; set "
                      "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD where the schedule runs instead")
    if errors:
        raise BadInput(*errors)


def add(name: str | None, overrides: Sequence[str], expr: str | None, tz: str | None, *, kind: str,
        replace: bool) -> Added:
    """Validate everything (name, cron, zone, the sweep's overrides), then record and install the schedule."""
    from sweeps.ops.prepare import prepare

    name = schedule.validate_name(name)
    expr = cron.validate_cron(expr)
    cron.validate_tz(tz)
    now = datetime.now(UTC)
    cron.check_fires(expr, tz, now)
    if schedule.entry_path(name).is_file() and not replace:
        raise BadInput(f"NAME: schedule {name!r} already exists ({schedule.entry_path(name)}); pass "
                       f"--replace to overwrite it, or remove it first (`python -m sweeps schedule remove "
                       f"{name}`)")
    spec = prepare([*overrides, f"++schedule.name={name}"])  # bad overrides die here, nothing written
    _refuse_stored_secrets(name, overrides)
    fields, guarded = cron.cron_fields(expr, tz, now) if kind == "cron" else (expr, False)
    entry = schedule.Entry(name=name, overrides=list(overrides), cron=expr, tz=tz, kind=kind,
                           project=str(Path.cwd()), home=str(paths.home()), env=schedule.carried_env(),
                           guarded=guarded)
    if schedule.entry_path(name).is_file():
        uninstall(schedule.load_entry(name))
    entry.log_path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "systemd":
        where = install_systemd(entry)
    elif kind == "cron":
        where = install_cron(entry, fields)
    else:
        where = "no scheduler (--no-install): run `python -m sweeps schedule run NAME`"
    schedule.save_entry(entry)
    return Added(entry, spec.sweep.name, where, cron.next_fires(expr, tz, now, 3))
