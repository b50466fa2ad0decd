"""Command line: ``python -m sweeps <command> ...``. The only layer that prints.

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
}
RUN_FLAGS_HELP = """\
usage: python -m sweeps run [+experiment=NAME] [key=value ...] [--dry-run] [--cfg job|all] [--resolve]

Compose a sweep from conf/ with Hydra overrides and run it.
  --dry-run        print the composed sweep, its search space and the resource plan; start nothing
  --cfg job|all    print the composed config (Hydra style) and exit
  --resolve        with --cfg: resolve interpolations
Overrides: group=option (e.g. scheduler=asha), key=value (e.g. sweep.num_samples=12,
search_space.lr.high=0.3), +experiment=NAME.
"""


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("sweeps").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("sweeps").handlers[:] = [_handler()]
    logging.getLogger("sweeps").propagate = False


def _handler() -> logging.Handler:
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[sweeps] %(message)s"))
    return h


def run_help() -> str:
    from sweeps.compose import groups

    lines = [RUN_FLAGS_HELP, "Config groups (group=option):"]
    for group, options in groups().items():
        lines.append(f"  {group:<14} {', '.join(options)}")
    return "\n".join(lines)


def cmd_run(argv: Sequence[str]) -> int:
    overrides: list[str] = []
    dry, cfg_mode, resolve = False, None, False
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(run_help())
            return 0
        if a == "--dry-run":
            dry = True
        elif a in ("--cfg", "-c"):
            cfg_mode = next(it, None)
            if cfg_mode not in ("job", "all"):
                raise BadInput(f"--cfg: expected job or all, got {cfg_mode!r}")
        elif a.startswith("--cfg="):
            cfg_mode = a.split("=", 1)[1]
            if cfg_mode not in ("job", "all"):
                raise BadInput(f"--cfg: expected job or all, got {cfg_mode!r}")
        elif a == "--resolve":
            resolve = True
        elif a.startswith("-"):
            raise BadInput(f"run: unknown flag {a!r}; flags: --dry-run, --cfg job|all, --resolve, --help")
        else:
            overrides.append(a)
    from sweeps import compose, runner

    if cfg_mode:
        cfg = compose.compose_config(overrides)
        print(compose.to_yaml(cfg, resolve=resolve), end="")
        return 0
    spec = runner.prepare(overrides)
    if dry:
        print(runner.dry_run(spec))
        return 0
    outcome = runner.execute(spec, overrides)
    print(format_outcome(outcome))
    return 130 if outcome.interrupted else 0


def format_outcome(outcome: object) -> str:
    """The one-screen summary printed at the end of a sweep."""
    import math

    from sweeps.runner import Outcome

    assert isinstance(outcome, Outcome)
    rec, s = outcome.record, outcome.summary
    c = s.counts
    lines = [
        "",
        f"sweep {rec.sweep_id}: {rec.status}" + (" (interrupted: resume with "
                                                   f"`python -m sweeps resume {rec.sweep_id}`)"
                                                   if outcome.interrupted else ""),
        f"  trials   : {c['total']} total, {c['completed']} completed, {c['early_stopped']} early-stopped, "
        f"{c['failed']} failed" + (f", {c['unfinished']} unfinished" if c["unfinished"] else ""),
        f"  wall time: {rec.wall_s or 0:.1f} s",
    ]
    if s.best is not None:
        lines += [f"  best     : {s.best.trial_id}  {s.metric} = {s.best.best:.4f} ({s.mode})",
                  f"  config   : {s.best.params}"]
    else:
        lines.append("  best     : none (no trial reported a finite metric)")
    if s.efficiency is not None and not math.isnan(s.efficiency):
        lines.append(f"  efficiency (T_ideal / T_observed): {s.efficiency:.2f}")
    lines.append(f"  results  : {rec.experiment_dir}")
    lines.append(f"  MLflow   : {rec.tracking_uri} (run {rec.parent_run_id}); browse with `python -m sweeps ui`")
    if rec.report_dir:
        lines.append(f"  report   : {rec.report_dir}")
    if outcome.promotion:
        lines.append(f"  promotion: {outcome.promotion}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sweeps",
                                description="Hyperparameter sweeps on Ray Tune + Ray Train, tracked in MLflow.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, text in COMMANDS.items():
        sp = sub.add_parser(name, help=text, description=text, add_help=name != "run")
        if name == "resume":
            sp.add_argument("sweep_id", metavar="SWEEP_ID", help="a sweep id or 'latest'")
            sp.add_argument("--retry-errored", action="store_true", help="also rerun trials that errored")
            sp.add_argument("overrides", nargs="*", help="key=value changes that do not redefine the sweep "
                            "(e.g. sweep.max_concurrent_trials=1)")
        elif name == "extend":
            sp.add_argument("sweep_id", metavar="SWEEP_ID")
            sp.add_argument("--more-trials", type=int, required=True, metavar="N", help="trials to add")
            sp.add_argument("overrides", nargs="*", help="key=value changes that do not redefine the sweep")
        elif name == "sync":
            sp.add_argument("sweep_id", metavar="SWEEP_ID")
        elif name == "report":
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
            sp.add_argument("sweep_id", metavar="SWEEP_ID", help="a sweep id or 'latest'")
            sp.add_argument("--model-name", default=None)
            sp.add_argument("--alias", default="champion")
            sp.add_argument("--trial", default=None, metavar="TRIAL_ID")
            sp.add_argument("--force", action="store_true", help="promote even if the champion is better")
        elif name == "models":
            sp.add_argument("name", nargs="?", default=None)
            sp.add_argument("--tracking-uri", default=None)
        elif name == "ui":
            sp.add_argument("--host", default="127.0.0.1")
            sp.add_argument("--port", type=int, default=5000)
            sp.add_argument("--tracking-uri", default=None)
        elif name == "doctor":
            sp.add_argument("--tracking-uri", default=None)
            sp.add_argument("--storage", default=None)
        elif name == "schedule":
            from sweeps.schedule_cli import add_arguments

            add_arguments(sp)
    return p


def dispatch(args: argparse.Namespace, rest: list[str]) -> int:
    cmd = args.command
    if cmd == "resume":
        from sweeps import resume

        return resume.cli_resume(args)
    if cmd == "extend":
        from sweeps import resume

        return resume.cli_extend(args)
    if cmd == "sync":
        from sweeps import sync

        return sync.cli_sync(args)
    if cmd in ("report", "compare", "list"):
        from sweeps import report_cli

        return int(getattr(report_cli, f"cli_{cmd}")(args))
    if cmd in ("promote", "models"):
        from sweeps import promote

        return int(getattr(promote, f"cli_{cmd}")(args))
    if cmd == "ui":
        from sweeps import ui

        return ui.cli_ui(args)
    if cmd == "schedule":
        from sweeps import schedule_cli

        return schedule_cli.cli_schedule(args, rest)
    if cmd == "doctor":
        from sweeps import doctor

        return doctor.cli_doctor(args)
    raise BadInput(f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = bool(argv) and argv[0] in ("-v", "--verbose")
    if verbose:
        argv = argv[1:]
    _setup_logging(verbose)
    try:
        if argv and argv[0] == "run":
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
        else:
            args, rest = parser.parse_args(argv), []
        return dispatch(args, rest)
    except SweepsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
