"""Renderers: a :class:`~sweeps.summary.Summary` -> trials.csv, summary.md, report.html and PNG plots.

The summary is the single source of truth; this module only lays it out. The Markdown and HTML reports share
one outline (:func:`outline`: sections of bullets and tables), so they always say the same thing. NaN/inf
values are written as ``NaN``/``inf``, never as a number, and failed trials are listed, never ranked.
"""

from __future__ import annotations

import base64
import html as htmlmod
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps import summary as summary_mod
from sweeps.store import SweepRecord
from sweeps.summary import Row, Schedule, Summary

log = logging.getLogger(__name__)

FORMATS = ("md", "csv", "html")
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


# ---------------------------------------------------------------------------------------------- formatting


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


# ---------------------------------------------------------------------------------------------------- CSV


def _csv_cell(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def trial_dict(summ: Summary, r: Row, params: Sequence[str], rank: int | None) -> dict[str, Any]:
    """One trials.csv row. Metric cells write NaN/inf as ``NaN``/``inf``; missing optional cells are empty."""
    m = summ.metric
    out: dict[str, Any] = {
        "trial_id": r.trial_id,
        "rank": rank if rank is not None else "",
        "status": r.status,
    }
    out.update({f"param/{k}": r.params.get(k, "") for k in params})
    out.update(
        {
            f"final/{m}": _csv_cell(r.final),
            f"best/{m}": _csv_cell(r.best),
            "best_iteration": "" if r.best_step is None else r.best_step,
            "epochs": r.epochs,
            "epochs_run": r.epochs_run,
            "early_stopped": r.early_stopped,
            "wall_s": round(r.wall_s, 3),
            "train_s": round(r.train_s, 3),
            "cpu_s": "" if r.cpu_s is None else round(r.cpu_s, 3),
            "gpu_s": "" if r.gpu_s is None else round(r.gpu_s, 3),
            "data_frac": "" if r.data_frac is None else round(r.data_frac, 4),
            "data_bound": r.data_bound,
            "nonfinite": r.nonfinite,
            "schedule": fmt_schedule(r.schedule),
            "error": r.error or "",
        }
    )
    return out


def trial_dicts(summ: Summary) -> list[dict[str, Any]]:
    """Every trial, one row each (ranked trials first, best first; then the rest in sweep order)."""
    params = _params(summ)
    ranks = {tid: i for i, tid in enumerate(summ.ranked, 1)}
    order = sorted(range(len(summ.rows)), key=lambda i: (ranks.get(summ.rows[i].trial_id, math.inf), i))
    return [trial_dict(summ, summ.rows[i], params, ranks.get(summ.rows[i].trial_id)) for i in order]


def trials_frame(summ: Summary) -> Any:
    """The trial table as a pandas DataFrame (same rows and columns as trials.csv)."""
    import pandas as pd

    return pd.DataFrame(trial_dicts(summ))


def csv_text(summ: Summary) -> str:
    """trials.csv's content (the csv module: no pandas needed); NaN/inf are written as ``NaN``/``inf``."""
    import csv
    import io

    rows = trial_dicts(summ)
    buf = io.StringIO()
    header = (
        list(rows[0])
        if rows
        else ["trial_id", "rank", "status", f"final/{summ.metric}", f"best/{summ.metric}"]
    )
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([row.get(k, "") for k in header] for row in rows)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ outline


def _best_section(summ: Summary) -> Section:
    b = summ.best
    if b is None:
        why = "no trial reported a finite value" if summ.rows else "the sweep has no trials"
        return Section("Best trial", [f"none: {why} of {summ.metric}"])
    bullets = [
        f"trial **{b.trial_id}**: {summ.metric} = {fmt(b.best)} ({summ.mode}), reached at iteration "
        f"{fmt(b.best_step)}; final value {fmt(b.final)}; {b.epochs} epoch(s), status {b.status}"
        + (" (early-stopped)" if b.early_stopped else "")
    ]
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


def _leaderboard(summ: Summary) -> Section:
    params = _params(summ)
    headers = [
        "rank",
        "trial",
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
    b = []
    if summ.epochs_budget:
        b.append(
            f"epochs trained: {summ.epochs_trained} of a full budget of {summ.epochs_budget} "
            f"({summ.max_epochs} per trial)"
        )
    else:
        b.append(f"epochs trained: {summ.epochs_trained}")
    if summ.compute_saved is not None:
        b.append(
            f"compute saved by early stopping: {summ.compute_saved:.0%} of the budget "
            f"({summ.compute_saved_epochs} epochs, about {_seconds(summ.compute_saved_s)} of training)"
        )
    else:
        b.append("compute saved by early stopping: n/a (no per-trial epoch budget known)")
    if summ.cpu_s_total is not None:
        b.append(
            f"compute spent: {summ.cpu_s_total:,.1f} CPU-seconds"
            + (f", {summ.gpu_s_total:,.1f} GPU-seconds" if summ.gpu_s_total else "")
            + f" ({fmt(summ.cpus_per_trial)} CPU(s)"
            + (f" + {fmt(summ.gpus_per_trial)} GPU(s)" if summ.gpus_per_trial else "")
            + " per trial x its wall time)"
        )
    b.append(f"pure training time over all trials: {_seconds(summ.train_s_total)}")
    if summ.efficiency is not None:
        b.append(
            f"efficiency = T_ideal / T_observed = {_seconds(summ.t_ideal_s)} / {_seconds(summ.wall_s)} = "
            f"{summ.efficiency:.2f} (T_ideal: the training time spread over {summ.slots} slot(s))"
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
        ],
    )
    other = [n for n in analysis.notes if not n.startswith("importance")]
    return [
        overview,
        _best_section(summ),
        _leaderboard(summ),
        _status_section(summ),
        _compute_section(summ),
        *_problem_sections(summ),
        *_schedule_section(summ),
        _importance_section(summ, analysis),
        *([Section("Notes", other)] if other else []),
    ]


# ----------------------------------------------------------------------------------------------- Markdown


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def md_table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return lines


def markdown(rec: SweepRecord, summ: Summary, analysis: Analysis | None = None) -> str:
    """summary.md: the outline as Markdown (pipe tables, no extra dependency)."""
    lines = [f"# Sweep {rec.sweep_id}", ""]
    for sec in outline(rec, summ, analysis):
        lines += [f"## {sec.title}", ""]
        if sec.bullets:
            lines += [f"- {b}" for b in sec.bullets] + [""]
        for t in sec.tables:
            lines += md_table(t) + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- HTML

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#f3f3f3}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


def _inline_md(text: str) -> str:
    """Escape, then turn the outline's ``**bold**`` into <b>."""
    parts = htmlmod.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def html_table(t: Table) -> str:
    head = "".join(f"<th>{htmlmod.escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{htmlmod.escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = htmlmod.escape(path.stem.replace("_", " "))
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'
    )


def html_page(
    title: str,
    sections: Sequence[Section],
    plots: Sequence[Path] = (),
    links: Mapping[str, str] | None = None,
) -> str:
    """A self-contained page: the sections, then the plots embedded as base64 PNGs."""
    out = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{htmlmod.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{htmlmod.escape(title)}</h1>"
    ]
    for sec in sections:
        out.append(f"<h2>{htmlmod.escape(sec.title)}</h2>")
        if sec.bullets:
            out.append("<ul>" + "".join(f"<li>{_inline_md(b)}</li>" for b in sec.bullets) + "</ul>")
        out += [html_table(t) for t in sec.tables]
    if plots:
        out.append("<h2>Plots</h2>")
        out += [_img(p) for p in plots]
    if links:
        out.append(
            "<h2>Files</h2><ul>"
            + "".join(
                f"<li><a href='{htmlmod.escape(href)}'>{htmlmod.escape(text)}</a></li>"
                for text, href in links.items()
            )
            + "</ul>"
        )
    out.append("</body></html>")
    return "\n".join(out)


def html(
    rec: SweepRecord,
    summ: Summary,
    plots: Sequence[Path] = (),
    analysis: Analysis | None = None,
    files: Sequence[str] = ("trials.csv", "summary.md"),
) -> str:
    """report.html: the same outline as summary.md, plus the plots (embedded) and links to ``files``."""
    return html_page(f"Sweep {rec.sweep_id}", outline(rec, summ, analysis), plots, {f: f for f in files})


# ------------------------------------------------------------------------------------------------ writing


def complete(rec: SweepRecord, records: list[Any], summ: Summary) -> Summary:
    """The summary with what the run-time one lacks: per-trial resources (from the sweep's config) and
    hyperparameter schedules (from Tune's result files). Unchanged when there are no records to re-read."""
    if not records:
        return summ
    from sweeps.results import read_param_schedules

    cpus, gpus = summary_mod.trial_resources(rec.config)
    try:
        schedules = read_param_schedules(records)
    except OSError as exc:
        log.warning("could not read hyperparameter schedules (%s)", exc)
        schedules = {}
    return summary_mod.recollect(
        summ, records, cpus_per_trial=cpus, gpus_per_trial=gpus, schedules=schedules or None
    )


def analyze(rec: SweepRecord, summ: Summary) -> Analysis:
    """Hyperparameter importances (Optuna), or the reason there are none."""
    try:
        imp, why = summary_mod.param_importances(summ, rec.config.get("search_space") or {})
    except Exception as exc:  # an analysis failure must not cost the report
        log.warning("importance failed: %s", exc)
        imp, why = {}, f"failed ({exc})"
    return Analysis(importances=imp, notes=[f"importance: not computed: {why}"] if why else [])


def write(
    rec: SweepRecord, records: list[Any], summ: Summary, out_dir: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Write the requested formats (``md``, ``csv``, ``html``; html brings the PNG plots) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summ = complete(rec, records, summ)
    written: list[Path] = []
    if "csv" in formats:
        p = out_dir / "trials.csv"
        p.write_text(csv_text(summ))
        written.append(p)
    if "md" not in formats and "html" not in formats:
        return written
    analysis = analyze(rec, summ)
    plots: list[Path] = []
    if "html" in formats:
        from sweeps import plots as plots_mod

        plots, notes = plots_mod.write_plots(
            summ, rec.config.get("search_space") or {}, analysis.importances, out_dir
        )
        analysis = Analysis(analysis.importances, [*analysis.notes, *notes])
    if "md" in formats:
        p = out_dir / "summary.md"
        p.write_text(markdown(rec, summ, analysis))
        written.append(p)
    if "html" in formats:
        p = out_dir / "report.html"
        p.write_text(html(rec, summ, plots, analysis, [w.name for w in written]))
        written += [p, *plots]
    return written


def write_all(rec: SweepRecord, records: list[Any], summ: Summary, out_dir: Path) -> list[Path]:
    """trials.csv, summary.md, report.html and the PNG plots into ``out_dir``; returns the paths written."""
    return write(rec, records, summ, out_dir, FORMATS)
