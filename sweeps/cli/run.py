"""``run``, ``resume`` and ``extend``: start or continue a sweep, and print its one-screen summary."""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Sequence

from sweeps.errors import BadInput

log = logging.getLogger(__name__)

RUN_FLAGS_HELP = """\
usage: python -m sweeps run [+experiment=NAME] [key=value ...] [--dry-run] [--cfg job|all] [--resolve]

Compose a sweep from conf/ with Hydra overrides and run it.
  --dry-run        print the composed sweep, its search space and the resource plan; start nothing
  --cfg job|all    print the composed config (Hydra style) and exit
  --resolve        with --cfg: resolve interpolations
  -v, --verbose    show Ray's, Tune's and MLflow's own log lines (the quiet terminal hides them)
Overrides: group=option (e.g. scheduler=asha), key=value (e.g. sweep.num_samples=12,
search_space.lr.high=0.3), +experiment=NAME.
"""


def run_help() -> str:
    from sweeps.config.compose import groups

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
    from sweeps.config import compose
    from sweeps.ops import prepare

    if cfg_mode:
        print(compose.shown_yaml(overrides, resolve=resolve), end="")
        return 0
    if dry:
        print(prepare.dry_run(prepare.prepare(overrides), overrides))
        return 0
    from sweeps.api import calls
    from sweeps.cli.terminal import sweep_terminal

    spec = calls.prepare_sweep(overrides)  # bad input is refused before the console log exists
    with sweep_terminal():
        result = calls.run_prepared(spec, overrides, hosted=False)
    return finished(result)


def finished(result: object) -> int:
    """Print a sweep's summary (a :class:`sweeps.api.SweepResult` of this process's run); its exit code."""
    outcome = getattr(result, "outcome", None)
    print(format_outcome(outcome))
    return int(getattr(outcome, "exit_code", 1))


def format_outcome(outcome: object) -> str:
    """The one-screen summary printed at the end of a sweep."""
    from sweeps.ops.run import Outcome

    if not isinstance(outcome, Outcome):
        raise TypeError(f"expected an Outcome, got {type(outcome).__name__}")
    rec, s = outcome.record, outcome.summary
    c = s.counts
    lines = [
        "",
        f"sweep {rec.sweep_id}: {'stalled' if outcome.stalled else rec.status}" + (
            f" (resume with `python -m sweeps resume {rec.sweep_id}`)" if outcome.interrupted else ""),
        *([f"  stalled  : {outcome.stalled}"] if outcome.stalled else []),
        *([f"  stopped  : {outcome.missing_metric}"] if outcome.missing_metric else []),
        f"  trials   : {c['total']} total, {c['completed']} completed, {c['early_stopped']} early-stopped, "
        f"{c['failed']} failed" + (f", {c['unfinished']} unfinished" if c["unfinished"] else ""),
        f"  wall time: {rec.wall_s or 0:.1f} s"
        + (" (stopped by sweep.time_budget_s)" if rec.stop_reason == "time_budget" else ""),
    ]
    hours = rec.hours or {}
    if hours.get("cpu_budget") or hours.get("gpu_budget"):
        lines.append(f"  budget   : {hours['cpu_used']:.3f} CPU-hours used" + (f" of {hours['cpu_budget']:g}" if
                     hours.get("cpu_budget") else "") + f", {hours['gpu_used']:.3f} GPU-hours" +
                     (f" of {hours['gpu_budget']:g}" if hours.get("gpu_budget") else "") +
                     (" (no new trial fitted the budget)" if rec.stop_reason == "resource_budget" else ""))
    if c["failed"]:
        lines.append(f"  failed   : {c['failed']} of {c['total']} trials failed" + _first_error(s))
    if s.best is not None:
        lines += [f"  best     : {s.best.trial_id}  {s.metric} = {s.best.best:.4f} ({s.mode})",
                  f"  config   : {s.best.params}"]
    else:
        lines.append("  best     : none (no trial succeeded: none ended without error and with a finite "
                     f"{s.metric})")
    if s.efficiency is not None and not math.isnan(s.efficiency):
        split = f" ({s.split_words()})" if s.split_words() else ""
        lines.append(f"  efficiency (T_ideal / T_observed): {s.efficiency:.2f}{split}")
    lines.append(f"  results  : {rec.experiment_dir}")
    lines += _mlflow_lines(rec)
    if rec.report_dir:
        lines.append(f"  report   : {rec.report_dir}/report.html")
    if outcome.promotion:
        lines.append(f"  promotion: {outcome.promotion}")
    return "\n".join(lines)


def _mlflow_lines(rec: object) -> list[str]:
    from sweeps.tracking import links

    uri, exp, parent = getattr(rec, "tracking_uri", ""), getattr(rec, "mlflow_experiment_id", ""), \
        getattr(rec, "parent_run_id", "")
    if not exp:
        return []
    lines = [f"  MLflow   : {links.runs_url(uri, exp)}  (this sweep's runs; the parent run expands to its trials)",
             f"  sweep run: {links.run_url(uri, exp, parent)}"]
    if links.needs_local_ui(uri):
        lines.append("  open them: python -m sweeps ui")
    return lines


def _first_error(s: object) -> str:
    failed = getattr(s, "failed", ())
    if not failed:
        return ""
    first = failed[0]
    where = f"; full traceback: {first.error_file}" if first.error_file else ""
    return f"; first: {first.trial_id}: {first.error or 'unknown error'}{where}"


def cli_resume(args: argparse.Namespace) -> int:
    from sweeps.api import calls
    from sweeps.cli.terminal import sweep_terminal

    with sweep_terminal():
        result = calls.resume_sweep(args.sweep_id, args.retry_errored, list(args.overrides or []), hosted=False)
    return finished(result)


def cli_extend(args: argparse.Namespace) -> int:
    from sweeps.api import calls
    from sweeps.cli.terminal import sweep_terminal

    t0 = time.monotonic()
    with sweep_terminal():
        result = calls.extend_sweep(args.sweep_id, args.more_trials, list(args.overrides or []), hosted=False)
    code = finished(result)
    log.debug("extend took %.1f s", time.monotonic() - t0)
    return code


def cli_confirm(args: argparse.Namespace) -> int:
    from sweeps.api import calls
    from sweeps.cli.terminal import sweep_terminal
    from sweeps.reports.outline import fmt

    with sweep_terminal():
        out = calls.confirm_sweep(args.sweep_id, args.top_k, args.seeds, list(args.overrides or []), hosted=False)
    print(f"\nconfirmed {len(out.intervals)} configuration(s) of {out.sweep_id} (95% t-intervals of "
          f"{out.metric}, best pessimistic end first):")
    for i, c in enumerate(out.intervals, 1):
        print(f"  {i}. {c.digest}  mean {fmt(c.mean)}  std {fmt(c.std)}  CI [{fmt(c.low)}, {fmt(c.high)}]  "
              f"n={c.n}  {c.params}")
    if out.note:
        print(f"  {out.note}")
    print(f"  report   : {out.report_path}")
    return 130 if out.interrupted else 0
