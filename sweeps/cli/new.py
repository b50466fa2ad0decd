"""``new trainable NAME [--from pkg.module:function | --script PATH [-- ARGS]]``: scaffold, then dry-run."""

from __future__ import annotations

import argparse


def add_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("what", choices=("trainable",), help="what to create")
    sp.add_argument("name", metavar="NAME", help="the trainable's name (a Python module name)")
    sp.add_argument("--from", dest="source", default=None, metavar="PKG.MODULE:FUNCTION",
                    help="sweep an existing training function instead of writing a new loop")
    sp.add_argument("--script", default=None, metavar="PATH",
                    help="sweep a training script as it is (Lightning, HF Trainer, torchrun-style, Accelerate): the "
                         "file you run; the rest of your usual command line follows `--`")
    sp.add_argument("--dir", default=None, help="the project folder to write into (default: the current one)")
    sp.set_defaults(fixed=[])  # with --script: the fixed part of the script's command line, after `--`


def cli_new(args: argparse.Namespace) -> int:
    from sweeps.errors import BadInput
    from sweeps.ops import prepare, scaffold

    fixed = list(args.fixed or [])
    if fixed and args.script is None:
        raise BadInput(f"new trainable: unexpected arguments {' '.join(fixed)}; fixed script arguments follow "
                       f"--script PATH --")
    if args.script and args.source:
        raise BadInput("new trainable: give --script PATH or --from pkg.module:function, not both")
    plan = scaffold.plan(args.name, args.source, args.dir, script=args.script, fixed=fixed)
    for path in scaffold.write(plan):
        print(f"wrote {path}")
    for note in plan.notes:
        print(f"  - {note}")
    if args.dir:
        import os

        os.chdir(args.dir)  # the project's configs: the ones the dry-run composes
    overrides = [f"+experiment={plan.experiment}"]
    print(prepare.dry_run(prepare.prepare(overrides), overrides))
    print(f"\nnext: python -m sweeps run +experiment={plan.experiment}")
    return 0


def cli_init(args: argparse.Namespace) -> int:
    import os

    from sweeps.ops import project

    for path in project.init(args.dir, args.name):
        print(f"wrote {path}")
    where = f"cd {args.dir} && " if args.dir and os.path.abspath(args.dir) != os.getcwd() else ""
    print(f"\nnext: {where}python -m sweeps run +experiment={args.name}   (your own trainable: python -m sweeps "
          f"new trainable NAME)")
    return 0
