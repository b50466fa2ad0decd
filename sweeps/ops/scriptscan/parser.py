"""Which command-line parser a script uses (LightningCLI, HfArgumentParser, argparse) and its options, one per name."""

from __future__ import annotations

import ast

from sweeps.ops.scriptscan.argparse_reader import _argparse_params
from sweeps.ops.scriptscan.hf_reader import _hf_params
from sweeps.ops.scriptscan.lightning_cli import _cli_params
from sweeps.ops.scriptscan.nodes import _Source
from sweeps.ops.scriptscan.result import Param

NO_PARSER = ("the script reads no command-line options sweeps can see (argparse, HfArgumentParser, LightningCLI): "
             "add a parser for the values to sweep")


def _parser(src: _Source) -> tuple[str | None, list[Param], list[str], str | None]:
    """The parser kind, its options (one per name), problems and the LightningCLI subcommand."""
    def called(suffix: str) -> ast.Call | None:
        return next((c for c in src.calls if (src.qualname(c.func) or "").endswith(suffix)), None)

    argparse_params, problems = _argparse_params(src)
    cli, hf = called("LightningCLI"), called("HfArgumentParser")
    subcommand = None
    if cli is not None:
        kind, (params, more, subcommand) = "lightningcli", _cli_params(src, cli)
        params, problems = params + argparse_params, more + problems
    elif hf is not None:
        kind, (params, more) = "hf", _hf_params(src, hf)
        params, problems = params + argparse_params, more + problems
    elif argparse_params or called("ArgumentParser") is not None:
        kind, params = "argparse", argparse_params
    else:
        return None, [], [NO_PARSER], None
    unique = list({p.name: p for p in reversed(params)}.values())[::-1]  # the first Param of each name
    return kind, unique, problems, subcommand
