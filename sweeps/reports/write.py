"""Writing a sweep's report folder: trials.csv, summary.md, report.html and the PNG plots."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeps.config import stored
from sweeps.reports import summary as summary_mod
from sweeps.reports.formats import FORMATS, csv_text, html, markdown
from sweeps.reports.importance import cache_path, cached_importances
from sweeps.reports.outline import Analysis
from sweeps.reports.summary import Summary
from sweeps.store import SweepRecord

log = logging.getLogger(__name__)


def complete(rec: SweepRecord, records: list[Any], summ: Summary) -> Summary:
    """The summary with what the run-time one lacks: per-trial resources (from the sweep's config) and
    hyperparameter schedules (from Tune's result files). Unchanged when there are no records to re-read."""
    if not records:
        return summ
    from sweeps.reports.results import read_param_schedules

    sweep = stored.of(rec)
    try:
        schedules = read_param_schedules(records)
    except OSError as exc:
        log.warning("could not read hyperparameter schedules (%s)", exc)
        schedules = {}
    return summary_mod.recollect(
        summ, records, cpus_per_trial=sweep.cpus_per_trial, gpus_per_trial=sweep.gpus_per_trial,
        schedules=schedules or None
    )


def _pareto(rec: SweepRecord, records: list[Any]) -> tuple[list[Any], tuple[Any, ...], tuple[Any, ...]]:
    from sweeps.reports.pareto import points

    sweep = stored.of(rec)
    objs, cons = sweep.objectives, sweep.constraints
    return (points(records, objs, cons) if objs else []), objs, cons


def _pareto_columns(rec: SweepRecord, records: list[Any]) -> dict[str, dict[str, Any]]:
    pts, objs, _ = _pareto(rec, records)
    return {p.trial_id: {**{f"point/{o.metric}": v for o, v in zip(objs, p.values, strict=True)},
                         "pareto_rank": p.rank, "feasible": p.feasible, "on_front": p.on_front} for p in pts}


def _pareto_plot(rec: SweepRecord, records: list[Any], out_dir: Path) -> Path | None:
    from sweeps.reports.pareto_view import plot

    pts, objs, _ = _pareto(rec, records)
    try:
        return plot(pts, objs, out_dir / "pareto_front.png") if objs else None
    except Exception as exc:  # a plot failure must not cost the report
        log.warning("Pareto plot failed: %s", exc)
        return None


def _confirmed(rec: SweepRecord, summ: Summary) -> list[Any]:
    """The confirmed configurations' intervals, read from the confirm runs' Ray results."""
    if not rec.confirm_dirs:
        return []
    from sweeps.reports.confirmed import intervals
    from sweeps.reports.results import load_records

    return intervals(load_records(rec.confirm_dirs, summ.metric, summ.mode), summ.metric, summ.mode)


def _confirmed_plot(rec: SweepRecord, summ: Summary, out_dir: Path) -> Path | None:
    from sweeps.reports.confirmed import plot

    try:
        return plot(_confirmed(rec, summ), summ.metric, out_dir / "confirmed_intervals.png")
    except Exception as exc:  # a plot failure must not cost the report
        log.warning("confirmed plot failed: %s", exc)
        return None


def analyze(rec: SweepRecord, summ: Summary, records: list[Any] | None = None,
            model_ids: Mapping[str, str] | None = None) -> Analysis:
    """Hyperparameter importances (Optuna; kept under the sweep index for the next report over the same trials), or
    the reason there are none; the confirmed configurations; each trial's MLflow model (``model_ids``), named where
    the ranking is shown."""
    try:
        space = stored.of(rec).space
        imp, why = cached_importances(summ, space, cache_path(rec.sweep_id))
    except Exception as exc:  # an analysis failure must not cost the report
        log.warning("importance failed: %s", exc)
        imp, why = {}, f"failed ({exc})"
    sections = []
    pts, objs, cons = _pareto(rec, records or [])
    if objs:
        from sweeps.reports import pareto_view

        sections.append(pareto_view.section(pts, objs, cons))
    from sweeps.reports import rungs, startup

    sections.append(startup.section(rec, records or [], summ))
    rung_section = rungs.section(rec, summ.epochs_trained)
    if rung_section is not None:
        sections.append(rung_section)
    if rec.confirm_dirs:
        from sweeps.reports.confirmed import section, winner_note

        found = _confirmed(rec, summ)
        sections.append(section(found, summ.metric, summ.mode,
                                winner_note(found, summ.best.params if summ.best else None)))
    return Analysis(importances=imp, notes=[f"importance: not computed: {why}"] if why else [], sections=sections,
                    model_ids=dict(model_ids or {}))


def _columns(rec: SweepRecord, records: list[Any], model_ids: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    """trials.csv's extra columns: the Pareto ones, and each trial's MLflow model id."""
    out = {k: dict(v) for k, v in (_pareto_columns(rec, records) or {}).items()}
    for trial_id, model_id in (model_ids or {}).items():
        out.setdefault(trial_id, {})["model_id"] = model_id
    return out


def write(
    rec: SweepRecord, records: list[Any], summ: Summary, out_dir: Path, formats: Sequence[str] = FORMATS,
    model_ids: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write the requested formats (``md``, ``csv``, ``html``; html brings the PNG plots) into ``out_dir``.
    ``model_ids``: each trial's MLflow model: a column of trials.csv, named in the best trial's section and the
    leaderboard of summary.md and report.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summ = complete(rec, records, summ)
    written: list[Path] = []
    if "csv" in formats:
        p = out_dir / "trials.csv"
        p.write_text(csv_text(summ, _columns(rec, records, model_ids)))
        written.append(p)
    if "md" not in formats and "html" not in formats:
        return written
    analysis = analyze(rec, summ, records, model_ids)
    plots: list[Path] = []
    if "html" in formats:
        from sweeps.reports import plots as plots_mod

        plots, notes = plots_mod.write_plots(
            summ, stored.of(rec).space, analysis.importances, out_dir
        )
        analysis = Analysis(analysis.importances, [*analysis.notes, *notes], analysis.sections, analysis.model_ids)
        confirmed_plot = _confirmed_plot(rec, summ, out_dir)
        plots += [confirmed_plot] if confirmed_plot else []
        front_plot = _pareto_plot(rec, records, out_dir)
        plots += [front_plot] if front_plot else []
    if "md" in formats:
        p = out_dir / "summary.md"
        p.write_text(markdown(rec, summ, analysis))
        written.append(p)
    if "html" in formats:
        p = out_dir / "report.html"
        p.write_text(html(rec, summ, plots, analysis, [w.name for w in written]))
        written += [p, *plots]
    return written


def trials_table(rec: SweepRecord, records: list[Any], summ: Summary,
                 model_ids: Mapping[str, str] | None = None) -> Any:
    """trials.csv as a pandas DataFrame: the same rows and columns, read back with pandas (NaN as NaN)."""
    import io

    import pandas as pd

    return pd.read_csv(io.StringIO(csv_text(complete(rec, records, summ), _columns(rec, records, model_ids))))


def write_all(rec: SweepRecord, records: list[Any], summ: Summary, out_dir: Path,
              model_ids: Mapping[str, str] | None = None) -> list[Path]:
    """trials.csv, summary.md, report.html and the PNG plots into ``out_dir``; returns the paths written."""
    return write(rec, records, summ, out_dir, FORMATS, model_ids)
