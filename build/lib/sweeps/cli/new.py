"""``new trainable NAME [--from pkg.module:function]``: scaffold a trainable, then show its dry-run."""

from __future__ import annotations

import argparse


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("what", choices=("trainable",), help="what to create")
    sp.add_argument("name", metavar="NAME", help="the trainable's name (a Python module name)")
    sp.add_argument("--from", dest="source", default=None, metavar="PKG.MODULE:FUNCTION",
                    help="sweep an existing training function instead of writing a new loop")


def cli_new(args: argparse.Namespace) -> int:
    from sweeps.ops import prepare, scaffold

    plan = scaffold.plan(args.name, args.source)
    for path in scaffold.write(plan):
        print(f"wrote {path}")
    spec = prepare.prepare([f"+experiment={plan.experiment}"])
    print(prepare.dry_run(spec))
    print(f"\nnext: python -m sweeps run +experiment={plan.experiment}")
    return 0
