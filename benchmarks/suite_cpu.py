"""Where a test run's CPU goes, process by process: Linux process accounting plus a map of command lines.

A 1 s sampler of ``/proc`` misses every process that lives less than a second (most CLI calls, probes, a
trial's helpers) and sees about a third of the slow tier's CPU. Process accounting (``accton``, package
``acct``) writes one record per process when it exits, with its own CPU time, pid and parent pid, so nothing is
missed; its name field is only the last thread's name, so this tool also records each new process's command
line (``record``, a 0.3 s scan of ``/proc`` for new pids, ~0% CPU). ``report`` joins the two and prints:

- the CPU of every ``python -m sweeps VERB`` call's process tree, by verb (driver, its Ray's workers and
  daemons, anything else it started), and the drivers' own CPU by verb;
- what the tests started outside those trees (cluster nodes, MLflow servers, kernels, virtualenvs, helpers),
  grouped by the test process's direct child.

Usage (as root, nothing else running)::

    touch /var/log/account/pacct.run && accton /var/log/account/pacct.run
    python benchmarks/suite_cpu.py record /tmp/pids.tsv &    # then run the suite, e.g. bash .ci/run
    accton off; kill %1
    python benchmarks/suite_cpu.py report /var/log/account/pacct.run /tmp/pids.tsv
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import time
from dataclasses import dataclass

VERB = re.compile(r"-m sweeps (\w+)")
DAEMONS = ("raylet", "gcs_server", "dashboard.py", "log_monitor", "monitor.py", "runtime_env", "dashboard/agent")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cpu_s: float
    cmd: str


def record(path: str, every_s: float = 0.3) -> None:
    """Append ``pid, ppid, time, command line`` for every process not seen before, until killed."""
    seen: set[str] = set()
    with open(path, "a", buffering=1) as out:
        while True:
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or pid in seen:
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
                    with open(f"/proc/{pid}/stat") as f:
                        ppid = f.read().rpartition(")")[2].split()[1]
                except (OSError, IndexError):
                    continue
                if cmd:
                    seen.add(pid)
                    out.write(f"{pid}\t{ppid}\t{time.time():.1f}\t{cmd}\n")
            time.sleep(every_s)


def load(pacct: str, pids: str) -> dict[int, Proc]:
    """Every accounted process, with the command line and parent the map saw at its start where it saw it."""
    seen: dict[int, tuple[int, str]] = {}
    with open(pids) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4:
                seen.setdefault(int(parts[0]), (int(parts[1]), parts[3]))
    dumped = subprocess.run(["dump-acct", pacct], capture_output=True, text=True, check=True).stdout
    procs: dict[int, Proc] = {}
    for line in dumped.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 11:
            continue
        pid, cpu = int(f[9]), (float(f[2]) + float(f[3])) / 100.0  # utime, stime in ticks of 1/100 s
        ppid, cmd = seen.get(pid, (int(f[10]), f"[{f[0]}]"))
        procs[pid] = Proc(pid, ppid, cpu + (procs[pid].cpu_s if pid in procs else 0.0), cmd)
    return procs


def role(cmd: str) -> str:
    if VERB.search(cmd):
        return "driver"
    if "default_worker" in cmd or cmd.startswith("ray::"):
        return "Ray worker processes"
    if any(d in cmd for d in DAEMONS) or cmd.startswith("ray::DashboardAgent") or "agent" in cmd:
        return "Ray daemons"
    return "other"


def ancestors(procs: dict[int, Proc], pid: int) -> list[int]:
    chain = []
    while pid > 1 and pid in procs and len(chain) < 64:
        chain.append(pid)
        pid = procs[pid].ppid
    return chain


def report(pacct: str, pids: str, top: int) -> None:
    procs = load(pacct, pids)
    total = sum(p.cpu_s for p in procs.values())
    by_verb: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    roles: collections.Counter[str] = collections.Counter()
    drivers: collections.Counter[str] = collections.Counter()
    outside: collections.Counter[str] = collections.Counter()
    tests = [pid for pid, p in procs.items() if "exec(eval(sys.stdin" in p.cmd]  # pytest-xdist's workers
    for pid, p in procs.items():
        chain = ancestors(procs, pid)
        sweeps = next((a for a in reversed(chain) if VERB.search(procs[a].cmd)), None)
        if sweeps is not None:
            verb = VERB.search(procs[sweeps].cmd).group(1)  # type: ignore[union-attr]
            by_verb[verb] += p.cpu_s
            calls[verb] += pid == sweeps
            roles[role(p.cmd)] += p.cpu_s
            drivers[verb] += p.cpu_s if pid == sweeps else 0.0
            continue
        worker = next((i for i, a in enumerate(chain) if a in tests), None)
        if worker is not None:
            child = chain[worker - 1] if worker > 0 else chain[worker]
            outside[re.sub(r"\d{4,}", "N", procs[child].cmd.split(" --")[0])[:110]] += p.cpu_s
    print(f"accounted: {total:.0f} CPU-s in {len(procs)} processes")
    print(f"\n`python -m sweeps VERB` process trees: {sum(by_verb.values()):.0f} CPU-s")
    for verb, s in by_verb.most_common():
        print(f"  {s:8.1f}  {calls[verb]:4d} calls  {verb}  (driver alone {drivers[verb]:.1f})")
    print("  by role:")
    for name, s in roles.most_common():
        print(f"  {s:8.1f}  {name}")
    print(f"\nstarted by the tests outside those trees: {sum(outside.values()):.0f} CPU-s (by the test's child)")
    for cmd, s in outside.most_common(top):
        print(f"  {s:8.1f}  {cmd}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="map new processes' command lines until killed")
    rec.add_argument("pids")
    rep = sub.add_parser("report", help="join process accounting and the map")
    rep.add_argument("pacct")
    rep.add_argument("pids")
    rep.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.command == "record":
        record(args.pids)
    else:
        report(args.pacct, args.pids, args.top)


if __name__ == "__main__":
    main()
