"""Renderers: a :class:`~sweeps.reports.summary.Summary` -> trials.csv, summary.md and report.html text."""

from __future__ import annotations

import base64
import html as htmlmod
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeps.reports.outline import Analysis, Section, Table, _params, fmt_schedule, outline
from sweeps.reports.summary import Row, Summary
from sweeps.store import SweepRecord

FORMATS = ("md", "csv", "html")


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
            "preemptions": "" if r.preemptions is None else r.preemptions,
            "epochs_lost": "" if r.epochs_lost is None else r.epochs_lost,
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


def csv_text(summ: Summary, extra: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """trials.csv's content (the csv module: no pandas needed); NaN/inf are written as ``NaN``/``inf``.

    ``extra``: more columns per trial id (a multi-objective sweep's Pareto point, rank and feasibility).
    """
    import csv
    import io

    rows = trial_dicts(summ)
    if extra:
        names = list(dict.fromkeys(k for cols in extra.values() for k in cols))
        rows = [{**row, **{k: _csv_cell(extra.get(row["trial_id"], {}).get(k, "")) for k in names}} for row in rows]
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
    """report.html: the same outline as summary.md, plus the plots (embedded), links to ``files`` and to the
    sweep's runs in the MLflow UI."""
    links = {f: f for f in files}
    if rec.mlflow_experiment_id:
        from sweeps.tracking import links as ui

        local = " (start it with `python -m sweeps ui`)" if ui.needs_local_ui(rec.tracking_uri) else ""
        links[f"this sweep's runs in the MLflow UI{local}"] = ui.runs_url(rec.tracking_uri, rec.mlflow_experiment_id)
        links[f"the sweep's parent run {rec.sweep_id}"] = ui.run_url(rec.tracking_uri, rec.mlflow_experiment_id,
                                                                     rec.parent_run_id)
    return html_page(f"Sweep {rec.sweep_id}", outline(rec, summ, analysis), plots, links)
