"""``promote`` and ``models``: register a sweep's best checkpoint, and list registered versions."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from sweeps.registry.gate import check_model_name
from sweeps.registry.registry import list_models


def format_table(rows: Sequence[Mapping[str, str]]) -> str:
    """A plain fixed-width table; the header comes from the first row's keys."""
    if not rows:
        return ""
    cols = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in cols}
    lines = ["  ".join(k.ljust(widths[k]) for k in cols).rstrip()]
    lines += ["  ".join(str(r[k]).ljust(widths[k]) for k in cols).rstrip() for r in rows]
    return "\n".join(lines)


# -- CLI ----------------------------------------------------------------------------------------------------
def cli_promote(args: argparse.Namespace) -> int:
    """``python -m sweeps promote SWEEP_ID|latest [--model-name N] [--alias A] [--trial T] [--force]
    [--rule R] [--confirmed]``; the sweep's ``notify`` settings get a ``promoted`` event."""
    from sweeps.api import promote
    from sweeps.ops import project

    project.importable()  # the project's own trainable: the `sweeps` script's sys.path starts at its bin/, not here
    print(promote(args.sweep_id, model_name=args.model_name, alias=args.alias, trial_id=args.trial,
                  force=bool(args.force), rule=args.rule, confirmed=bool(args.confirmed)))
    return 0


def cli_models(args: argparse.Namespace) -> int:
    """``python -m sweeps models [NAME] [--tracking-uri URI]``: registered versions as a table."""
    from sweeps import paths

    uri = args.tracking_uri or paths.default_tracking_uri()
    if args.name is not None:
        check_model_name(args.name, "NAME")
    rows = list_models(uri, args.name)
    if not rows:
        print(f"no registered models in {uri}; promote a sweep with `python -m sweeps promote latest`")
        return 0
    print(format_table(rows))
    return 0
