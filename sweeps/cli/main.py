"""``python -m sweeps <command> ...``: the parser, the dispatch to each command group, and the exit codes.

Heavy libraries (ray, torch, mlflow, pandas) are imported inside the commands, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from sweeps.errors import EXIT_BAD_INPUT, BadInput, SweepsError

COMMANDS = {
    "run": "run a sweep: python -m sweeps run +experiment=NAME [key=value ...] [--dry-run] [--cfg job]",
    "resume": "continue an interrupted sweep (finished trials kept, unfinished ones from their checkpoints)",
    "extend": "add trials to a finished sweep, guided by its restored searcher",
    "sync": "back-fill MLflow from a sweep's Ray results (idempotent) and close runs left RUNNING",
    "report": "rebuild a sweep's report from stored results",
    "compare": "side-by-side report of two sweeps",
    "list": "past sweeps as a table",
    "promote": "register a sweep's best checkpoint in the MLflow Model Registry (champion-gated)",
    "models": "registered model versions with aliases, metric and lineage",
    "ui": "start the MLflow UI on 127.0.0.1 for the configured store",
    "schedule": "nightly sweeps: schedule add|list|remove|run",
    "doctor": "check the environment and say how to fix what is wrong",
    "new": "scaffold a trainable in your project: new trainable NAME [--from pkg.module:function] [--dir D]",
    "init": "start a project here (or --dir): conf/, search_spaces/ and a starter experiment",
    "confirm": "re-run the top-k configurations with fresh seeds; rank them by 95 percent intervals",
    "status": "a sweep's state, trials, best, time left and what it holds (--watch, --json)",
    "stop": "stop a running sweep gracefully, or --now (resumable either way)",
    "pause": "hold a running sweep: no trial starts until unpause",
    "unpause": "let a paused sweep start trials again",
    "trial": "trial stop SWEEP TRIAL_ID: end one trial at its next report, as an early stop",
}


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sweeps").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("sweeps").handlers[:] = [_handler()]
    logging.getLogger("sweeps").propagate = False


def _handler() -> logging.Handler:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[sweeps] %(message)s"))
    return h


def _ui_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--host", default="127.0.0.1",
                    help="interface to listen on (default 127.0.0.1); any other needs --auth or --insecure")
    sp.add_argument("--port", type=int, default=5000)
    sp.add_argument("--tracking-uri", default=None)
    sp.add_argument("--auth", action="store_true", help="MLflow's basic-auth app: a user and password on every request")
    sp.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without authentication")


def _doctor_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--tracking-uri", default=None)
    sp.add_argument("--storage", default=None)
    sp.add_argument("--address", default=None, help="a Ray cluster's address: is its State API up?")


VERBOSE = ("-v", "--verbose")
VERBOSE_HELP = "debug logging, and Ray's, Tune's, MLflow's and the trials' own output on the terminal"


def _verbose_flag(default: object) -> argparse.ArgumentParser:
    """``-v``, before the command or after it (a parent of every command's parser): the command's copy has no
    default, so it never hides one given before the command."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(*VERBOSE, action="store_true", default=default, help=VERBOSE_HELP)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sweeps", parents=[_verbose_flag(False)],
                                description="Hyperparameter sweeps on Ray Tune + Ray Train, tracked in MLflow.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, text in COMMANDS.items():
        sp = sub.add_parser(name, help=text, description=text, add_help=name != "run",
                            parents=[_verbose_flag(argparse.SUPPRESS)])
        if name in ("resume", "extend", "confirm", "sync"):
            _rerun_arguments(name, sp)
        else:
            _other_arguments(name, sp)
    return p


def _rerun_arguments(name: str, sp: argparse.ArgumentParser) -> None:
    """The arguments of the commands that run a stored sweep again (resume, extend, confirm) and of sync."""
    helps = {"resume": "a sweep id or 'latest'", "confirm": "a finished sweep's id or 'latest'"}
    sp.add_argument("sweep_id", metavar="SWEEP_ID", help=helps.get(name))
    if name == "sync":
        return
    if name == "resume":
        sp.add_argument("--retry-errored", action="store_true", help="also rerun trials that errored")
    elif name == "extend":
        sp.add_argument("--more-trials", type=int, required=True, metavar="N", help="trials to add")
    else:
        sp.add_argument("--top-k", type=int, default=None, metavar="K", help="configurations (confirm.top_k)")
        sp.add_argument("--seeds", type=int, default=None, metavar="N", help="seeds each (confirm.seeds)")
    sp.add_argument("overrides", nargs="*", help="key=value changes that do not redefine the sweep" + (
        " (e.g. sweep.max_concurrent_trials=1)" if name == "resume" else ""))


def _other_arguments(name: str, sp: argparse.ArgumentParser) -> None:
    if name == "report":
        sp.add_argument("sweep_id", metavar="SWEEP_ID", help="a sweep id or 'latest'")
        sp.add_argument("--format", choices=("md", "csv", "html", "all"), default="all")
        sp.add_argument("--out", default=None, help="output folder (default reports/<experiment>/<id>)")
    elif name == "compare":
        sp.add_argument("sweep_a", metavar="SWEEP_A")
        sp.add_argument("sweep_b", metavar="SWEEP_B")
        sp.add_argument("--out", default=None)
    elif name == "list":
        sp.add_argument("--experiment", default=None)
    elif name == "promote":
        _promote_arguments(sp)
    elif name == "models":
        sp.add_argument("name", nargs="?", default=None)
        sp.add_argument("--tracking-uri", default=None)
    elif name == "ui":
        _ui_arguments(sp)
    elif name == "doctor":
        _doctor_arguments(sp)
    elif name == "schedule":
        from sweeps.cli.schedule import add_arguments

        add_arguments(sp)
    elif name == "new":
        from sweeps.cli import new

        new.add_arguments(sp)
    elif name in ("status", "stop", "pause", "unpause", "trial"):
        from sweeps.cli import operate

        operate.add_arguments(name, sp)
    elif name == "init":
        sp.add_argument("--dir", default=None, help="the project folder (default: the current one)")
        sp.add_argument("--name", default="starter", help="the starter experiment's name")


def _promote_arguments(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("sweep_id", metavar="SWEEP_ID", help="a sweep id or 'latest'")
    sp.add_argument("--model-name", default=None)
    sp.add_argument("--alias", default="champion")
    sp.add_argument("--trial", default=None, metavar="TRIAL_ID")
    sp.add_argument("--force", action="store_true", help="promote even if the champion is better")
    sp.add_argument("--rule", default=None, help="multi-objective: best_primary | cheapest_within:PCT "
                    "(default: the sweep's promote.rule)")
    sp.add_argument("--confirmed", action="store_true",
                    help="promote `sweeps confirm`'s winner, gated on its pessimistic bound")


# command -> (module under sweeps.cli, function): each group's module is imported only when it runs
HANDLERS = {
    "resume": ("run", "cli_resume"), "extend": ("run", "cli_extend"),
    "sync": ("mlflow", "cli_sync"), "ui": ("mlflow", "cli_ui"),
    "report": ("reports", "cli_report"), "compare": ("reports", "cli_compare"), "list": ("reports", "cli_list"),
    "promote": ("models", "cli_promote"), "models": ("models", "cli_models"),
    "doctor": ("doctor", "cli_doctor"), "new": ("new", "cli_new"), "init": ("new", "cli_init"),
    "confirm": ("run", "cli_confirm"), "status": ("operate", "cli_status"), "stop": ("operate", "cli_stop"),
    "pause": ("operate", "cli_pause"), "unpause": ("operate", "cli_unpause"), "trial": ("operate", "cli_trial"),
}


def dispatch(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib

    cmd = args.command
    if cmd == "schedule":
        from sweeps.cli import schedule

        return schedule.cli_schedule(args, rest)
    if cmd not in HANDLERS:
        raise BadInput(f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}")
    module, func = HANDLERS[cmd]
    return int(getattr(importlib.import_module(f"sweeps.cli.{module}"), func)(args))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = bool(argv) and argv[0] in VERBOSE
    if verbose:
        argv = argv[1:]
    if argv and argv[0] == "run":  # run's own arguments are Hydra overrides (never `-v`): -v anywhere after it
        verbose = verbose or any(a in VERBOSE for a in argv)
        argv = [a for a in argv if a not in VERBOSE]
    _setup_logging(verbose)
    try:
        if argv and argv[0] == "run":
            from sweeps.cli.run import cmd_run

            return cmd_run(argv[1:])
        parser = build_parser()
        if not argv:
            parser.print_help()
            return EXIT_BAD_INPUT
        if argv[0] not in COMMANDS and not argv[0].startswith("-"):
            import difflib

            close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise BadInput(f"unknown command {argv[0]!r}{hint} Commands: {', '.join(COMMANDS)}")
        if argv[0] == "schedule":
            args, rest = parser.parse_known_args(argv)
        elif argv[0] == "new" and "--" in argv:  # new trainable NAME --script PATH -- FIXED ARGS
            cut = argv.index("--")
            args, rest = parser.parse_args(argv[:cut]), []
            args.fixed = argv[cut + 1:]
        else:
            args, rest = parser.parse_args(argv), []
        if getattr(args, "verbose", False):  # given after the command
            _setup_logging(True)
        return dispatch(args, rest)
    except SweepsError as exc:
        from sweeps.config.redaction import scrub

        print(f"error: {scrub(str(exc))}", file=sys.stderr)  # no secret echoed into a terminal or cron log
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
