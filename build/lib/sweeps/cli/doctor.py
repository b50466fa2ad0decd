"""``doctor``: print each environment check, and the fix for what is wrong."""

from __future__ import annotations

import argparse

from sweeps.ops.doctor import run_checks


def cli_doctor(args: argparse.Namespace) -> int:
    results = run_checks(getattr(args, "tracking_uri", None), getattr(args, "storage", None),
                         getattr(args, "address", None))
    width = max(len(c.name) for c in results)
    for c in results:
        mark = "ok  " if c.ok else ("FAIL" if c.required else "warn")
        line = f"[{mark}] {c.name:<{width}}  {c.detail}"
        if not c.ok and c.fix:
            line += f"\n       {'':<{width}}  fix: {c.fix}"
        print(line)
    bad = [c for c in results if c.required and not c.ok]
    print(f"\n{len(bad)} problem(s)" if bad else "\nall required checks passed")
    return 1 if bad else 0
