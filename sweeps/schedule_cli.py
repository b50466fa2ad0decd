"""``python -m sweeps schedule add|list|remove|run``: nightly sweeps from cron or a systemd user timer.

``add`` validates everything (name, ``--cron``, ``--tz``, the Hydra overrides) before it writes anything,
then installs one tagged block in the user's crontab (``crontab -l`` / ``crontab -``; other lines stay
untouched) or, with ``--systemd``, a user service + timer under ``~/.config/systemd/user``. ``run`` is what
cron calls.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sweeps import paths, schedule
from sweeps.errors import BadInput, SweepsError

log = logging.getLogger(__name__)
ACTIONS = ("add", "list", "remove", "run")
CRON_LINE_MAX = 990  # Vixie cron truncates longer command lines (MAX_COMMAND 1000)


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.usage = ("python -m sweeps schedule add NAME +experiment=X [key=value ...] --cron EXPR [--tz ZONE] "
                "[--replace] [--systemd | --no-install]\n"
                "       python -m sweeps schedule list | remove NAME | run NAME")
    sp.add_argument("action", choices=ACTIONS, help="add | list | remove | run")
    sp.add_argument("name", nargs="?", default=None, metavar="NAME",
                    help="schedule name (letters, digits, _ -)")
    sp.add_argument("--cron", default=None, metavar="EXPR",
                    help="5-field cron expression, e.g. '0 2 * * *'")
    sp.add_argument("--tz", default=None, metavar="ZONE",
                    help="IANA time zone of --cron (default: the system's)")
    sp.add_argument("--replace", action="store_true", help="replace an existing schedule of the same name")
    sp.add_argument("--systemd", action="store_true",
                    help="install a systemd user timer instead of a crontab line")
    sp.add_argument("--no-install", action="store_true",
                    help="only record the schedule; an external scheduler (e.g. a Kubernetes CronJob) runs "
                         "`python -m sweeps schedule run NAME`")
    # Set by guarded cron lines (a --tz other than the system's): the time cron fired, for the due check.
    sp.add_argument("--fired-at", type=float, default=None, help=argparse.SUPPRESS)


def cli_schedule(args: argparse.Namespace, rest: list[str]) -> int:
    action = args.action
    if action != "add":
        extra = list(rest)
        if extra or (action != "run" and args.fired_at is not None):
            raise BadInput(f"schedule {action}: unexpected argument(s) {' '.join(extra) or '--fired-at'}; "
                           f"overrides and --cron/--tz belong to `schedule add`")
    if action == "add":
        return cli_add(args, rest)
    if action == "list":
        return cli_list(args)
    if action == "remove":
        return cli_remove(args)
    from sweeps import nightly

    return nightly.run(schedule.validate_name(args.name), fired_at=args.fired_at)


def _out(text: str) -> None:
    print(text)  # noqa: T201 - the CLI layer prints


# --- add ----------------------------------------------------------------------------------------------------


def cli_add(args: argparse.Namespace, overrides: list[str]) -> int:
    name = schedule.validate_name(args.name)
    bad = [a for a in overrides if a.startswith("-")]
    if bad:
        raise BadInput(f"schedule add: unknown flag(s) {' '.join(bad)}; flags: --cron, --tz, --replace, "
                       f"--systemd")
    expr = schedule.validate_cron(args.cron)
    schedule.validate_tz(args.tz)
    now = datetime.now(UTC)
    schedule.check_fires(expr, args.tz, now)
    if schedule.entry_path(name).is_file() and not args.replace:
        raise BadInput(f"NAME: schedule {name!r} already exists ({schedule.entry_path(name)}); pass "
                       f"--replace to overwrite it, or remove it first (`python -m sweeps schedule remove "
                       f"{name}`)")
    from sweeps import runner

    spec = runner.prepare([*overrides, f"++schedule.name={name}"])  # bad overrides die here, nothing written
    if args.systemd and args.no_install:
        raise BadInput("schedule add: --systemd and --no-install exclude each other")
    kind = "systemd" if args.systemd else "external" if args.no_install else "cron"
    fields, guarded = schedule.cron_fields(expr, args.tz, now) if kind == "cron" else (expr, False)
    entry = schedule.Entry(name=name, overrides=list(overrides), cron=expr, tz=args.tz,
                           kind=kind, project=str(Path.cwd()),
                           home=str(paths.home()), env=schedule.carried_env(), guarded=guarded)
    if schedule.entry_path(name).is_file():
        _uninstall(schedule.load_entry(name))
    entry.log_path.parent.mkdir(parents=True, exist_ok=True)
    where = {"systemd": install_systemd, "cron": lambda e: install_cron(e, fields),
             "external": lambda e: "no scheduler (--no-install): run `python -m sweeps schedule run NAME`"
             }[kind](entry)
    schedule.save_entry(entry)
    fires = schedule.next_fires(expr, args.tz, now, 3)
    _out(f"schedule {name}: {spec.sweep.name} sweep at cron '{expr}'" + (f" ({args.tz})" if args.tz else "")
         + f"; installed in {where}")
    _out(f"  next: {', '.join(_fmt(f) for f in fires)}")
    _out(f"  log : {entry.log_path}")
    return 0


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M %Z")


# --- crontab ------------------------------------------------------------------------------------------------


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
    block = schedule.crontab_block(entry, sys.executable, fields)
    if len(block[1]) > CRON_LINE_MAX:
        raise BadInput(f"schedule add: the crontab line would be {len(block[1])} characters (cron cuts at "
                       f"{CRON_LINE_MAX}); shorten PATH or the project path, or use --systemd")
    with _crontab_lock():
        current, _ = schedule.strip_block(read_crontab(), entry.name, entry.home)
        write_crontab(schedule.with_block(current, block))
    log.debug("crontab line: %s", block[1])
    return "the crontab" + (" (hourly, acting only when due in the zone)" if entry.guarded else "")


def remove_cron(entry: schedule.Entry) -> int:
    with _crontab_lock():
        text, removed = schedule.strip_block(read_crontab(), entry.name, entry.home)
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


# --- systemd ------------------------------------------------------------------------------------------------


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
    folder = schedule.systemd_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for fname, text in schedule.systemd_units(entry, sys.executable).items():
        (folder / fname).write_text(text)
    timer = f"{schedule.unit_name(entry.name)}.timer"
    if _systemctl("daemon-reload") and _systemctl("enable", "--now", timer):
        return f"{folder} (timer {timer} enabled)"
    log.warning("schedule %s: unit files written, but the timer is not active; enable it with "
                "`systemctl --user daemon-reload && systemctl --user enable --now %s`", entry.name, timer)
    return f"{folder} (not yet enabled)"


def remove_systemd(entry: schedule.Entry) -> int:
    timer = f"{schedule.unit_name(entry.name)}.timer"
    _systemctl("disable", "--now", timer, quiet=True)
    removed = 0
    for fname in (f"{schedule.unit_name(entry.name)}.service", timer):
        path = schedule.systemd_dir() / fname
        if path.is_file():
            path.unlink()
            removed += 1
    _systemctl("daemon-reload", quiet=True)
    return removed


def _uninstall(entry: schedule.Entry) -> int:
    if entry.kind == "external":
        return 0
    return remove_systemd(entry) if entry.kind == "systemd" else remove_cron(entry)


# --- list / remove ------------------------------------------------------------------------------------------


def cli_remove(args: argparse.Namespace) -> int:
    entry = schedule.load_entry(schedule.validate_name(args.name))
    removed = _uninstall(entry)
    schedule.delete_entry(entry.name)
    if entry.kind == "systemd":
        where = f"its systemd timer and service ({removed} file(s)) removed"
    elif entry.kind == "external":
        where = "nothing was installed (--no-install)"
    else:
        where = "its crontab lines removed" if removed else "it was no longer in the crontab"
    _out(f"schedule {entry.name}: removed; {where}; its log {entry.log_path} is kept")
    return 0


def _installed(entry: schedule.Entry, crontab: str | None) -> str:
    if entry.kind == "external":
        return "not installed here (an external scheduler runs it)"
    if entry.kind == "systemd":
        ok = (schedule.systemd_dir() / f"{schedule.unit_name(entry.name)}.timer").is_file()
        return "systemd user timer" if ok else "MISSING: the systemd timer file is gone"
    if crontab is None:
        return "crontab (cannot read it)"
    _, n = schedule.strip_block(crontab, entry.name, entry.home)
    return "crontab" if n else "MISSING from the crontab (re-add with --replace)"


def _last(state: dict[str, object] | None) -> str:
    if not state:
        return "never run"
    when = state.get("finished") or state.get("started")
    stamp = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(when)) if isinstance(when, int | float) else "?"
    text = (f"{state.get('sweep_id') or '-'} {state.get('status', '?')}, exit {state.get('exit_code', '?')} "
            f"({stamp})")
    if state.get("message"):
        text += f": {str(state['message']).splitlines()[0][:160]}"
    return text


def cli_list(args: argparse.Namespace) -> int:
    if args.name:
        raise BadInput(f"schedule list: unexpected argument {args.name!r}")
    items = schedule.entries()
    if not items:
        _out(f"no schedules under {schedule.schedules_dir()}; add one with `python -m sweeps schedule add "
             f"nightly +experiment=quickstart --cron '0 2 * * *'`")
        return 0
    crontab = None
    if any(e.kind == "cron" for e in items):
        try:
            crontab = read_crontab()
        except SweepsError as exc:
            log.warning("%s", exc)
    now = datetime.now(UTC)
    for e in items:
        fires = schedule.next_fires(e.cron, e.tz, now, 3)
        _out(f"{e.name}: cron '{e.cron}'" + (f" ({e.tz})" if e.tz else " (system time zone)")
             + f"  {' '.join(e.overrides) or '(default config)'}")
        _out(f"  next     : {', '.join(_fmt(f) for f in fires) or 'never'}")
        _out(f"  last run : {_last(schedule.read_state(e.name))}")
        _out(f"  installed: {_installed(e, crontab)}; log {e.log_path}")
    return 0
