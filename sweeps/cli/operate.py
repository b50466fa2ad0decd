"""``status``, ``stop``, ``pause``, ``unpause`` and ``trial stop``: operate a running sweep from any shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def add_arguments(name: str, sp: argparse.ArgumentParser) -> None:
    where = "a sweep id, 'latest', or its experiment folder's URI (s3://bucket/sweeps/SWEEP_ID)"
    if name == "trial":
        sp.add_argument("action", choices=("stop",))
    sp.add_argument("sweep", metavar="SWEEP", nargs="?" if name == "status" else None, default="latest",
                    help=where)
    if name == "trial":
        sp.add_argument("trial_id", metavar="TRIAL_ID")
    if name == "status":
        sp.add_argument("--watch", action="store_true", help="refresh in place every 2 s until the sweep ends")
        sp.add_argument("--json", action="store_true", help="the status as JSON")
    if name == "stop":
        sp.add_argument("--now", action="store_true", help="kill the running trials at once (still resumable)")


def _ago(t: Any) -> str:
    return f"{time.time() - t:.0f} s ago" if isinstance(t, int | float) else "?"


def _clock(t: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if isinstance(t, int | float) else "?"


def format_status(s: dict[str, Any]) -> str:
    d, c = s.get("driver") or {}, s.get("trials") or {}
    state = s.get("state", "?") + (f" ({s['state_note']})" if s.get("state_note") else "")
    lines = [f"sweep {s.get('sweep_id')}: {state}",
             f"  driver   : {d.get('host')}:{d.get('pid')}, launched by {d.get('launched_by', '?')}, started "
             f"{_clock(d.get('started'))}, lease until {_clock(d.get('lease_expires'))}",
             f"  trials   : {c.get('running', 0)} running, {c.get('waiting', 0)} waiting, {c.get('done', 0)} done, "
             f"{c.get('stopped_early', c.get('early_stopped', 0))} stopped early, {c.get('failed', 0)} failed"
             + (f" (of {c['planned']})" if c.get("planned") else "")]
    best = s.get("best")
    if best:
        lines.append(f"  best     : {s.get('metric')} {best.get('value')} (trial {best.get('trial_id')}: "
                     f"{best.get('params')})")
    if s.get("elapsed_s") is not None:
        lines.append(f"  elapsed  : {s['elapsed_s']:.0f} s" + (f"; {s['left']}" if s.get("left") else ""))
    held = s.get("held") or {}
    if held:
        lines.append("  holding  : " + ", ".join(f"{k} {v:g}" for k, v in held.items() if k != "nodes")
                     + (f" on {', '.join(held.get('nodes') or [])}" if held.get("nodes") else ""))
    if s.get("last_progress"):
        lines.append(f"  progress : last {_ago(s['last_progress'])} (a trial started, reported or ended)")
    if s.get("paused"):
        lines.append(f"  paused   : by {s['paused'].get('by')} since {_clock(s['paused'].get('since'))}")
    if s.get("stopping"):
        lines.append(f"  stopping : asked by {s['stopping'].get('by')} at {_clock(s['stopping'].get('since'))}")
    if s.get("stopped"):
        lines.append(f"  stopped  : by {s['stopped'].get('by')} at {_clock(s['stopped'].get('at'))}"
                     + (" (--now)" if s["stopped"].get("now") else ""))
    for tid, stop in (s.get("trial_stops") or {}).items():
        lines.append(f"  stopped  : trial {tid} by {stop.get('by')} at {_clock(stop.get('at'))}")
    return "\n".join(lines)


def cli_status(args: argparse.Namespace) -> int:
    from sweeps.ops import operate

    while True:
        s = operate.status(args.sweep)
        text = json.dumps(s, indent=1, sort_keys=True, default=str) if args.json else format_status(s)
        if args.watch and sys.stdout.isatty():
            print("\x1b[H\x1b[J" + text, flush=True)
        else:
            print(text, flush=True)
        if not args.watch or not s.get("alive"):
            return 0
        time.sleep(2.0)


STOP_WAIT_S = 300.0  # a graceful stop waits for each running trial's next checkpoint
TRIAL_STOP_WAIT_S = 60.0


def _send(args: argparse.Namespace, verb: str, trial_id: str | None = None, wait_applied_s: float = 0.0) -> int:
    from sweeps.ops import operate

    answer = operate.send(args.sweep, verb, trial_id)
    print(f"{verb} sweep {answer['sweep_id']}: {answer.get('state')} ({answer.get('why')})", flush=True)
    if wait_applied_s and answer.get("state") == "accepted":
        done = operate.wait_applied(args.sweep, answer, wait_applied_s)
        if done.get("state") == "applied":
            print(f"  applied: {done.get('why')}")
        else:
            print(f"  not applied within {wait_applied_s:.0f} s (it applies when it can): see `python -m sweeps "
                  f"status {answer['sweep_id']}`")
    return 0


def cli_stop(args: argparse.Namespace) -> int:
    return _send(args, "stop_now" if args.now else "stop", wait_applied_s=STOP_WAIT_S)


def cli_pause(args: argparse.Namespace) -> int:
    return _send(args, "pause")


def cli_unpause(args: argparse.Namespace) -> int:
    return _send(args, "unpause")


def cli_trial(args: argparse.Namespace) -> int:
    return _send(args, "trial_stop", args.trial_id, wait_applied_s=TRIAL_STOP_WAIT_S)
