"""``schedule add|list|remove|run``: nightly sweeps from cron, a systemd user timer or an outside scheduler.

``add`` validates everything (name, ``--cron``, ``--tz``, the Hydra overrides) before it writes anything;
``run`` is what cron calls.
"""

from __future__ import annotations

import argparse
import logging
import time
from datetime import UTC, datetime

from sweeps.errors import BadInput, SweepsError
from sweeps.ops import cron, install, schedule

log = logging.getLogger(__name__)


ACTIONS = ("add", "list", "remove", "run")


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
    from sweeps.ops import nightly

    return nightly.run(schedule.validate_name(args.name), fired_at=args.fired_at)


def _out(text: str) -> None:
    print(text)


def cli_add(args: argparse.Namespace, overrides: list[str]) -> int:
    bad = [a for a in overrides if a.startswith("-")]
    if bad:
        raise BadInput(f"schedule add: unknown flag(s) {' '.join(bad)}; flags: --cron, --tz, --replace, "
                       f"--systemd")
    if args.systemd and args.no_install:
        raise BadInput("schedule add: --systemd and --no-install exclude each other")
    kind = "systemd" if args.systemd else "external" if args.no_install else "cron"
    added = install.add(args.name, overrides, args.cron, args.tz, kind=kind, replace=args.replace)
    e = added.entry
    _out(f"schedule {e.name}: {added.sweep_name} sweep at cron '{e.cron}'" + (f" ({e.tz})" if e.tz else "")
         + f"; installed in {added.where}")
    _out(f"  next: {', '.join(_fmt(f) for f in added.fires)}")
    _out(f"  log : {e.log_path}")
    return 0


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M %Z")


def cli_remove(args: argparse.Namespace) -> int:
    entry = schedule.load_entry(schedule.validate_name(args.name))
    removed = install.uninstall(entry)
    schedule.delete_entry(entry.name)
    if entry.kind == "systemd":
        where = f"its systemd timer and service ({removed} file(s)) removed"
    elif entry.kind == "external":
        where = "nothing was installed (--no-install)"
    else:
        where = "its crontab lines removed" if removed else "it was no longer in the crontab"
    _out(f"schedule {entry.name}: removed; {where}; its log {entry.log_path} is kept")
    return 0


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
            crontab = install.read_crontab()
        except SweepsError as exc:
            log.warning("%s", exc)
    now = datetime.now(UTC)
    for e in items:
        fires = cron.next_fires(e.cron, e.tz, now, 3)
        _out(f"{e.name}: cron '{e.cron}'" + (f" ({e.tz})" if e.tz else " (system time zone)")
             + f"  {' '.join(e.overrides) or '(default config)'}")
        _out(f"  next     : {', '.join(_fmt(f) for f in fires) or 'never'}")
        _out(f"  last run : {_last(schedule.read_state(e.name))}")
        _out(f"  installed: {install.installed(e, crontab)}; log {e.log_path}")
    return 0
