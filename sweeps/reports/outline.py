"""The report's content as an outline of sections (bullets and tables), shared by the Markdown and HTML
renderers so they always say the same thing. NaN/inf values are written as ``NaN``/``inf``, never as a
number, and failed trials are listed, never ranked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from sweeps.reports import preempted
from sweeps.reports.summary import CLOCK_WORDS, Schedule, Summary
from sweeps.store import SweepRecord

MAX_LISTED = 50  # failed / NaN / data-bound trials listed in summary.md (trials.csv has all)


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Section:
    title: str
    bullets: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass(frozen=True)
class Analysis:
    """What the renderers add on top of the summary: importances (Optuna) and notes on skipped parts."""

    importances: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)  # e.g. the confirmed configurations
    model_ids: dict[str, str] = field(default_factory=dict)  # trial id -> its MLflow model (the Models tab)


def fmt(x: Any) -> str:
    """A cell: floats to 4 significant digits, NaN as ``NaN``, infinities as ``inf``/``-inf``."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:.4g}"
    return str(x)


def num(x: Any) -> float | None:
    """A number as a float; None for anything else (bools included)."""
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def fmt_schedule(schedule: Schedule) -> str:
    """``{lr: ((1, 0.01), (5, 0.02))}`` -> ``lr: 1→0.01, 5→0.02``."""
    return "; ".join(
        f"{k}: " + ", ".join(f"{step}→{fmt(v)}" for step, v in seq) for k, seq in schedule.items()
    )


def _params(summ: Summary) -> list[str]:
    return summ.param_names()


def _seconds(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.1f} s"


def date_text(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _best_section(summ: Summary, model_ids: dict[str, str] | None = None) -> Section:
    b = summ.best
    if b is None:
        why = "no trial reported a finite value" if summ.rows else "the sweep has no trials"
        return Section("Best trial", [f"none: {why} of {summ.metric}"])
    bullets = [
        f"trial **{b.trial_id}**: {summ.metric} = {fmt(b.best)} ({summ.mode}), reached at iteration "
        f"{fmt(b.best_step)}; final value {fmt(b.final)}; {b.epochs} epoch(s), status {b.status}"
        + (" (early-stopped)" if b.early_stopped else "")
    ]
    model = (model_ids or {}).get(b.trial_id)
    if model:
        bullets.append(f"its MLflow model: {model} (models:/{model}), in the experiment's Models tab")
    if summ.ties:
        bullets.append(
            f"tied with {', '.join(summ.ties)} (same {summ.metric}); the tie goes to the trial that "
            f"reached it at the earlier iteration, then to the earlier trial"
        )
    if b.schedule:
        bullets.append(
            f"its hyperparameters changed during training (iteration→value): {fmt_schedule(b.schedule)}; "
            f"the table shows the final values"
        )
    if b.nonfinite:
        bullets.append(
            f"note: this trial also reported non-finite {summ.metric} values (its best finite value is shown)"
        )
    table = Table(["parameter", "value"], [[k, fmt(v)] for k, v in b.params.items()])
    return Section("Best trial", bullets, [table])


def _leaderboard(summ: Summary, model_ids: dict[str, str] | None = None) -> Section:
    params = _params(summ)
    ids = model_ids or {}
    headers = [
        "rank",
        "trial",
        *(["MLflow model"] if ids else []),
        f"best {summ.metric}",
        "at iter",
        "final",
        "epochs",
        "early-stopped",
        "wall s",
        *params,
    ]
    rows = []
    for i, r in enumerate(summ.leaderboard, 1):
        rows.append(
            [
                str(i),
                r.trial_id + (" ⚠NaN" if r.nonfinite else ""),
                *([ids.get(r.trial_id, "")] if ids else []),
                fmt(r.best),
                fmt(r.best_step),
                fmt(r.final),
                str(r.epochs),
                fmt(r.early_stopped),
                f"{r.wall_s:.1f}",
                *(fmt(r.params.get(p)) for p in params),
            ]
        )
    bullets = [] if rows else ["no ranked trial (every trial failed or reported no finite value)"]
    return Section(
        f"Leaderboard (top {summ.top_k}, {summ.mode} {summ.metric})",
        bullets,
        [Table(headers, rows)] if rows else [],
    )


def _status_section(summ: Summary) -> Section:
    labels = {
        "total": "total",
        "completed": "completed (full budget)",
        "early_stopped": "early-stopped",
        "failed": "failed",
        "unfinished": "unfinished",
        "nonfinite": "reported NaN/inf",
        "data_bound": "waiting on data (>50% of loop time)",
    }
    rows = [[labels.get(k, k), str(v)] for k, v in summ.counts.items()]
    return Section("Trials by status", [], [Table(["status", "trials"], rows)])


def _compute_section(summ: Summary) -> Section:
    b = [f"epochs trained: {summ.epochs_trained}" + (
        f" of a full budget of {summ.epochs_budget} ({summ.max_epochs} per trial)" if summ.epochs_budget else "")]
    b.append(f"compute saved by early stopping: {summ.compute_saved:.0%} of the budget ({summ.compute_saved_epochs} "
             f"epochs, about {_seconds(summ.compute_saved_s)} of training)" if summ.compute_saved is not None
             else "compute saved by early stopping: n/a (no per-trial epoch budget known)")
    if summ.cpu_s_total is not None:
        b.append(
            f"compute spent: {summ.cpu_s_total:,.1f} CPU-seconds"
            + (f", {summ.gpu_s_total:,.1f} GPU-seconds" if summ.gpu_s_total else "")
            + f" ({fmt(summ.cpus_per_trial)} CPU(s)"
            + (f" + {fmt(summ.gpus_per_trial)} GPU(s)" if summ.gpus_per_trial else "")
            + " per trial x its wall time)"
        )
    clocks = "; ".join(CLOCK_WORDS[c] for c in summ.train_s_from) or "no trial reported"
    b.append(f"training time over all trials: {_seconds(summ.train_s_total)} ({clocks})")
    if summ.efficiency is not None:
        b.append(
            f"efficiency = T_ideal / T_observed = {_seconds(summ.t_ideal_s)} / {_seconds(summ.wall_s)} = "
            f"{summ.efficiency:.2f} (T_ideal: the training time spread over {summ.slots} slot(s))"
            + (f"; the slot-seconds went to {summ.split_words()}" if summ.split_words() else "")
        )
    else:
        b.append("efficiency: n/a (sweep wall time or slots unknown)")
    return Section("Compute", b)


def _capped(rows: list[list[str]], what: str) -> tuple[list[list[str]], list[str]]:
    if len(rows) <= MAX_LISTED:
        return rows, []
    return rows[:MAX_LISTED], [f"{len(rows) - MAX_LISTED} more {what}: see trials.csv"]


def _problem_sections(summ: Summary) -> list[Section]:
    out = []
    if summ.failed:
        rows, more = _capped(
            [
                [r.trial_id, r.status, str(r.iterations), fmt(r.best), (r.error or "")[:200]]
                for r in summ.failed
            ],
            "failed trials",
        )
        out.append(
            Section(
                "Failed trials (listed, never ranked)",
                more,
                [Table(["trial", "status", "iterations", f"best {summ.metric}", "error"], rows)],
            )
        )
    bad = [r for r in summ.rows if r.nonfinite]
    if bad:
        rows, more = _capped([[r.trial_id, r.status, fmt(r.best), fmt(r.final)] for r in bad], "trials")
        out.append(
            Section(
                f"Trials that reported NaN/inf {summ.metric}",
                [
                    "a non-finite value is never a best value; a trial without a finite value is not ranked",
                    *more,
                ],
                [Table(["trial", "status", "best finite", "final"], rows)],
            )
        )
    slow = [r for r in summ.rows if r.data_bound]
    if slow:
        rows, more = _capped([[r.trial_id, f"{(r.data_frac or 0):.0%}"] for r in slow], "trials")
        out.append(
            Section(
                "Trials waiting on data",
                [
                    "more than half of the training loop's time went to loading data: more data-loader "
                    "workers, larger batches or data in memory would help",
                    *more,
                ],
                [Table(["trial", "mean share of time on data"], rows)],
            )
        )
    return out


def _schedule_section(summ: Summary) -> list[Section]:
    if not summ.schedules:
        return []
    rows = [
        [tid, name, ", ".join(f"{s}→{fmt(v)}" for s, v in seq)]
        for tid, sched in summ.schedules.items()
        for name, seq in sched.items()
    ]
    rows, more = _capped(rows, "schedules")
    return [
        Section(
            "Hyperparameter schedules (changed during the trial, e.g. by PBT)",
            ["iteration→value, from the first value to each change", *more],
            [Table(["trial", "parameter", "schedule"], rows)],
        )
    ]


def _importance_section(summ: Summary, analysis: Analysis) -> Section:
    if not analysis.importances:
        why = next((n for n in analysis.notes if n.startswith("importance")), "importance: not computed")
        return Section("Hyperparameter importance", [why])
    rows = [[k, f"{v:.3f}"] for k, v in sorted(analysis.importances.items(), key=lambda kv: -kv[1])]
    return Section(
        "Hyperparameter importance",
        [f"Optuna fANOVA over the {len(summ.ranked)} ranked trial(s), target: best {summ.metric}"],
        [Table(["parameter", "importance"], rows)],
    )


def _budget_bullets(rec: SweepRecord) -> list[str]:
    h = rec.hours or {}
    return [f"resource budget: {h[f'{k}_used']:.3f} {k.upper()}-hours used of {h[f'{k}_budget']:g}"
            + (" (the sweep stopped starting trials at the budget)" if rec.stop_reason == "resource_budget" else "")
            for k in ("cpu", "gpu") if h.get(f"{k}_budget")]


def outline(rec: SweepRecord, summ: Summary, analysis: Analysis | None = None) -> list[Section]:
    """The report's content, shared by the Markdown and HTML renderers."""
    analysis = analysis or Analysis()
    c = summ.counts
    overview = Section(
        "Overview",
        [
            f"sweep: {rec.sweep_id}",
            f"experiment: {rec.experiment}",
            f"started: {date_text(rec.created)}",
            f"status: {rec.status}",
            f"objective: {summ.metric} ({summ.mode})",
            f"searcher / scheduler: {rec.searcher or 'n/a'} / {rec.scheduler or 'n/a'}",
            f"trials: {c.get('total', 0)} total, {c.get('completed', 0)} completed, "
            f"{c.get('early_stopped', 0)} early-stopped, {c.get('failed', 0)} failed, "
            f"{c.get('unfinished', 0)} unfinished, "
            f"{c.get('nonfinite', 0)} with NaN/inf",
            f"wall time: {_seconds(summ.wall_s)}",
            *_budget_bullets(rec),
            *([f"listeners: {rec.listeners}"] if rec.listeners else []),
            *([f"driver peak memory: {rec.driver_peak_rss_mb:,.0f} MiB RSS"] if rec.driver_peak_rss_mb else []),
        ],
    )
    other = [n for n in analysis.notes if not n.startswith("importance")]
    return [
        overview,
        _best_section(summ, analysis.model_ids),
        _leaderboard(summ, analysis.model_ids),
        _status_section(summ),
        _compute_section(summ),
        *_problem_sections(summ),
        *([Section(p.title, p.bullets, [Table(p.headers, p.rows)] if p.rows else [])]
          if (p := preempted.part(summ.rows, MAX_LISTED)) else []),
        *_schedule_section(summ),
        _importance_section(summ, analysis),
        *analysis.sections,
        *([Section("Notes", other)] if other else []),
    ]
