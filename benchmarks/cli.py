"""Latency of ``python -m sweeps --help`` and ``python -m sweeps run --help`` in fresh processes (goal <= 0.5 s).

Each command runs N times (alternating), from spawn to exit; prints the median, min and max, then the
slowest imports of one ``-X importtime`` run of each (cumulative microseconds), to show where time goes.

    python benchmarks/cli.py [N=10] [--top 8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, ForeignLoad, load_average, median  # noqa: E402

COMMANDS = {"--help": ["--help"], "run --help": ["run", "--help"]}
GOAL_S = 0.5


def once(args: list[str], extra: list[str] | None = None) -> tuple[float, str]:
    env = {**os.environ, "SWEEPS_CONF_DIR": str(REPO / "conf")}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, *(extra or []), "-m", "sweeps", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 2):  # bare `sweeps` prints help and exits 2; --help exits 0
        raise SystemExit(f"sweeps {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, proc.stderr


def slowest_imports(stderr: str, top: int) -> list[tuple[int, str]]:
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self_us, cum_us, name = line[len("import time:"):].split("|")
        rows.append((int(cum_us), name.strip()))
    rows.sort(reverse=True)
    return rows[:top]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", nargs="?", type=int, default=10)
    p.add_argument("--top", type=int, default=8)
    a = p.parse_args()
    print(f"cli: {a.n} fresh processes each, alternating; load {load_average()}")
    once(["--help"])  # warm the OS page cache and __pycache__ once (not counted)
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    with ForeignLoad() as others:
        for _ in range(a.n):
            for name, args in COMMANDS.items():
                times[name].append(once(args)[0])
    print(f"  meanwhile: {others}")
    for name, xs in times.items():
        m = median(xs)
        print(f"  python -m sweeps {name:<11}: median {m:.3f} s (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)}); "
              f"goal <= {GOAL_S} s: {'met' if m <= GOAL_S else 'MISSED'}")
    base = median([_bare() for _ in range(5)])
    print(f"  bare `python -c pass`: median {base:.3f} s (the interpreter's own start-up)")
    for name, args in COMMANDS.items():
        _, err = once(args, ["-X", "importtime"])
        top = ", ".join(f"{mod} {us / 1e3:.0f} ms" for us, mod in slowest_imports(err, a.top))
        print(f"  slowest imports for `{name}` (cumulative): {top}")
    print(f"load at the end: {load_average()}")


def _bare() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
