"""``report``, ``compare`` and ``list``: reports rebuilt from stored results (nothing is rerun).

The sweep index (:mod:`sweeps.store`) finds a sweep; its Ray results folder (Tune's experiment state and each
trial's ``result.json``) gives the trial records; :mod:`sweeps.summary` and :mod:`sweeps.report` do the rest.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps import report, store, summary
from sweeps.errors import BadInput, SweepsError
from sweeps.report import Section, Table, fmt
from sweeps.store import SweepRecord
from sweeps.summary import Summary

log = logging.getLogger(__name__)

SKIP_CONFIG_DIFF = ("search_space", "hydra")  # search_space has its own table


class NoResults(SweepsError):
    """A sweep whose Ray results are gone (or were never written)."""


# ------------------------------------------------------------------------------------------------ loading


def _objective(rec: SweepRecord) -> tuple[str, str]:
    sweep_cfg = rec.config.get("sweep") or {}
    return rec.metric or str(sweep_cfg.get("metric", "")), rec.mode or str(sweep_cfg.get("mode", "max"))


def load_sweep(rec: SweepRecord) -> tuple[list[Any], Summary]:
    """A sweep's trial records and summary: from its Ray results folder(s), else from its MLflow runs.

    Raises:
        NoResults: when neither the Ray results nor the sweep's MLflow runs can be read.
    """
    from sweeps.results import load_records

    metric, mode = _objective(rec)
    settings = summary.settings_from_config(rec.config)
    if any(Path(d).is_dir() for d in rec.experiment_dirs):
        records = load_records(rec.experiment_dirs, metric, mode, settings["max_epochs"],
                               settled=rec.status == "finished")
    else:
        log.warning(
            "sweep %s: Ray results gone (%s); rebuilding from its MLflow runs",
            rec.sweep_id,
            ", ".join(rec.experiment_dirs),
        )
        records = records_from_mlflow(rec)
    summ = summary.collect(records, metric, mode, wall_s=rec.wall_s, slots=rec.slots, **settings)
    return records, summ


def _param_value(text: str) -> Any:
    """MLflow keeps params as strings: give numbers back their type."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _mlflow_history(c: Any, run: Any) -> list[dict[str, float]]:
    """A child run's metric histories -> one row per step, like Tune's result.json rows.

    The tracker's ``hp/<name>`` metrics (the hyperparameters in force at each step) become ``config/<name>``,
    which :func:`sweeps.summary.collect` reads as the trial's hyperparameter schedule.
    """
    rows: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        name = summary.CONFIG_PREFIX + key[3:] if key.startswith("hp/") else key
        for m in c.get_metric_history(run.info.run_id, key):
            rows.setdefault(int(m.step), {"training_iteration": float(m.step)})[name] = float(m.value)
    return [rows[step] for step in sorted(rows)]


def records_from_mlflow(rec: SweepRecord) -> list[Any]:
    """The sweep's trials rebuilt from its nested MLflow runs (params, metric histories, status tags).

    Raises:
        NoResults: when the store is gone or holds no trial run of this sweep.
    """
    from sweeps import tracking
    from sweeps.results import TrialRecord

    uri = rec.tracking_uri
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_file():
        raise NoResults(
            f"sweep {rec.sweep_id}: its Ray results ({', '.join(rec.experiment_dirs)}) and its "
            f"MLflow store ({uri}) are both gone; nothing to report"
        )
    if not rec.parent_run_id or not rec.mlflow_experiment_id:
        raise NoResults(f"sweep {rec.sweep_id}: its Ray results are gone and it has no MLflow parent run")
    tracking.probe(uri)
    c = tracking.client(uri)
    runs = tracking.find_runs(
        c, [rec.mlflow_experiment_id], f"tags.`{tracking.PARENT_TAG}` = '{rec.parent_run_id}'"
    )
    if not runs:
        raise NoResults(
            f"sweep {rec.sweep_id}: its Ray results are gone and MLflow ({uri}) has no trial runs "
            f"under parent run {rec.parent_run_id}"
        )
    space = rec.config.get("search_space") or {}
    status_of = {"FINISHED": "TERMINATED", "FAILED": "ERROR", "KILLED": "KILLED"}
    records = []
    for run in sorted(runs, key=lambda r: r.data.tags.get(tracking.TAG_TRIAL, "")):
        tags, params = run.data.tags, run.data.params
        names = [k for k in space if k in params] or list(params)  # the space's order, as Tune's
        records.append(
            TrialRecord(
                trial_id=tags.get(tracking.TAG_TRIAL, run.info.run_id),
                status=tags.get("status") or status_of.get(run.info.status, run.info.status),
                params={k: _param_value(params[k]) for k in names},
                history=_mlflow_history(c, run),
                early_stopped=tags.get("early_stopped") == "true",
                error=tags.get("error") or None,
                best_checkpoint=tags.get("best_checkpoint") or None,
            )
        )
    return records


def default_report_dir(rec: SweepRecord) -> Path:
    """``<report.dir>/<experiment>/<sweep id>`` (report.dir is ``reports`` unless the sweep set it)."""
    base = (rec.config.get("report") or {}).get("dir") or "reports"
    return Path(base) / rec.experiment / rec.sweep_id


# ------------------------------------------------------------------------------------------------- report


def cli_report(args: argparse.Namespace) -> int:
    """``python -m sweeps report SWEEP_ID|latest [--format md|csv|html|all] [--out DIR]``."""
    rec = store.load(args.sweep_id)
    fmt_arg = getattr(args, "format", "all") or "all"
    if fmt_arg != "all" and fmt_arg not in report.FORMATS:
        raise BadInput(f"--format: {fmt_arg!r} is not a format; choose md, csv, html or all")
    formats = report.FORMATS if fmt_arg == "all" else (fmt_arg,)
    out = (Path(args.out) if getattr(args, "out", None) else default_report_dir(rec)).resolve()
    records, summ = load_sweep(rec)
    written = report.write(rec, records, summ, out, formats)
    print(f"report for {rec.sweep_id} ({len(records)} trial(s)) in {out}:")  # noqa: T201
    for p in written:
        print(f"  {p}")  # noqa: T201
    return 0


# ------------------------------------------------------------------------------------------------ compare


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{key}."))
        else:
            out[key] = v
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _delta(a: Any, b: Any) -> str:
    fa, fb = _num(a), _num(b)
    if fa is None or fb is None or not (math.isfinite(fa) and math.isfinite(fb)):
        return ""
    return f"{fb - fa:+.4g}"


def _pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 1)


def _best(rec: SweepRecord, summ: Summary | None) -> tuple[float, str, dict[str, Any]]:
    """(best value, trial id, params): from the summary, else from the index record."""
    if summ is not None:
        if summ.best is None:
            return math.nan, "", {}
        return summ.best.best, summ.best.trial_id, dict(summ.best.params)
    b = rec.best or {}
    value = _num(b.get("value"))
    return (
        value if value is not None else math.nan,
        str(b.get("trial_id", "")),
        dict(b.get("params") or {}),
    )


def _side_by_side(a: SweepRecord, b: SweepRecord, sa: Summary | None, sb: Summary | None) -> Table:
    (va, ta, _), (vb, tb, _) = _best(a, sa), _best(b, sb)

    def counts(rec: SweepRecord, s: Summary | None) -> str:
        c = s.counts if s is not None else rec.counts
        return (
            f"{c.get('total', 0)} ({c.get('completed', 0)} completed, {c.get('early_stopped', 0)} "
            f"early-stopped, {c.get('failed', 0)} failed)"
        )

    def attr(s: Summary | None, name: str) -> Any:
        return getattr(s, name) if s is not None else None

    ma, mb = _objective(a), _objective(b)
    rows: list[tuple[str, Any, Any]] = [
        ("sweep", a.sweep_id, b.sweep_id),
        ("experiment", a.experiment, b.experiment),
        ("started", report.date_text(a.created), report.date_text(b.created)),
        ("status", a.status, b.status),
        ("objective", f"{ma[0]} ({ma[1]})", f"{mb[0]} ({mb[1]})"),
        ("searcher / scheduler", f"{a.searcher} / {a.scheduler}", f"{b.searcher} / {b.scheduler}"),
        ("trials", counts(a, sa), counts(b, sb)),
        ("best metric", va, vb),
        ("best trial", ta, tb),
        ("wall time (s)", a.wall_s, b.wall_s),
        ("CPU-seconds", attr(sa, "cpu_s_total"), attr(sb, "cpu_s_total")),
        ("GPU-seconds", attr(sa, "gpu_s_total"), attr(sb, "gpu_s_total")),
        ("epochs trained", attr(sa, "epochs_trained"), attr(sb, "epochs_trained")),
        (
            "compute saved by early stopping (%)",
            _pct(attr(sa, "compute_saved")),
            _pct(attr(sb, "compute_saved")),
        ),
        ("efficiency (T_ideal / T_observed)", attr(sa, "efficiency"), attr(sb, "efficiency")),
    ]
    return Table(["", "A", "B", "B − A"], [[k, fmt(x), fmt(y), _delta(x, y)] for k, x, y in rows])


def _param_table(pa: Mapping[str, Any], pb: Mapping[str, Any]) -> Table:
    names = list(dict.fromkeys([*pa, *pb]))
    rows = []
    for n in names:
        x, y = pa.get(n, "(absent)"), pb.get(n, "(absent)")
        rows.append([n, fmt(x), fmt(y), "yes" if x != y else "", _delta(x, y)])
    return Table(["parameter", "A", "B", "differs", "B − A"], rows)


def _verdict(a: SweepRecord, b: SweepRecord, sa: Summary | None, sb: Summary | None) -> str:
    (metric_a, mode), (metric_b, _) = _objective(a), _objective(b)
    va, vb = _best(a, sa)[0], _best(b, sb)[0]
    if metric_a != metric_b:
        return (
            f"the sweeps optimize different metrics ({metric_a} vs {metric_b}): "
            "best values are not comparable"
        )
    if not (math.isfinite(va) and math.isfinite(vb)):
        return "at least one sweep has no finite best value: no winner"
    if va == vb:
        return f"both reach {metric_a} = {fmt(va)}"
    better = vb > va if mode == "max" else vb < va
    return (
        f"{'B' if better else 'A'} is better: best {metric_a} {fmt(vb if better else va)} vs "
        f"{fmt(va if better else vb)} ({mode}; B − A = {vb - va:+.4g})"
    )


def comparison_sections(
    a: SweepRecord, b: SweepRecord, sa: Summary | None, sb: Summary | None
) -> list[Section]:
    """The comparison's content: side-by-side table, best configs, search spaces, other config changes."""
    notes = [f"A = {a.sweep_id}", f"B = {b.sweep_id}", _verdict(a, b, sa, sb)]
    for rec, s in ((a, sa), (b, sb)):
        if s is None:
            notes.append(f"{rec.sweep_id}: Ray results gone; figures from the sweep index only")
    space_a, space_b = a.config.get("search_space") or {}, b.config.get("search_space") or {}
    space = Table(
        ["parameter", "A", "B", "differs"],
        [
            [
                n,
                _space_text(space_a.get(n)),
                _space_text(space_b.get(n)),
                "yes" if space_a.get(n) != space_b.get(n) else "",
            ]
            for n in dict.fromkeys([*space_a, *space_b])
        ],
    )
    fa = {k: v for k, v in _flat(a.config).items() if not k.startswith(SKIP_CONFIG_DIFF)}
    fb = {k: v for k, v in _flat(b.config).items() if not k.startswith(SKIP_CONFIG_DIFF)}
    changed = [
        [k, fmt(fa.get(k, "(absent)")), fmt(fb.get(k, "(absent)"))]
        for k in sorted(set(fa) | set(fb))
        if fa.get(k, "(absent)") != fb.get(k, "(absent)")
    ]
    return [
        Section("Comparison", notes, [_side_by_side(a, b, sa, sb)]),
        Section("Best configuration, per parameter", [], [_param_table(_best(a, sa)[2], _best(b, sb)[2])]),
        Section("Search space, per parameter", [], [space]),
        Section(
            "Other configuration differences",
            [] if changed else ["none"],
            [Table(["key", "A", "B"], changed)] if changed else [],
        ),
    ]


def _space_text(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return "(absent)"
    return ", ".join(f"{k}={v}" for k, v in spec.items())


def _try_load(rec: SweepRecord) -> tuple[list[Any], Summary | None]:
    try:
        records, summ = load_sweep(rec)
    except NoResults as exc:
        log.warning("%s", exc)
        return [], None
    return records, report.complete(rec, records, summ)


def write_comparison(rec_a: SweepRecord, rec_b: SweepRecord, out_dir: Path) -> Path:
    """Side-by-side report of two sweeps: ``compare.md`` and ``compare.html`` (with a plot) in ``out_dir``.

    Works from stored results only; when a sweep's Ray results are gone, its figures come from the sweep
    index. Returns the path of ``compare.md``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    _, sa = _try_load(rec_a)
    _, sb = _try_load(rec_b)
    sections = comparison_sections(rec_a, rec_b, sa, sb)
    title = f"{rec_a.sweep_id} vs {rec_b.sweep_id}"
    lines = [f"# {title}", ""]
    for sec in sections:
        lines += [f"## {sec.title}", ""] + [f"- {x}" for x in sec.bullets] + ([""] if sec.bullets else [])
        for t in sec.tables:
            lines += report.md_table(t) + [""]
    md = out_dir / "compare.md"
    md.write_text("\n".join(lines))
    plots = []
    try:
        plot = _plot_best_curves(rec_a, rec_b, sa, sb, out_dir / "compare_best_curves.png")
        plots = [plot] if plot else []
    except Exception as exc:  # a plot failure must not cost the comparison
        log.warning("comparison plot failed: %s", exc)
    (out_dir / "compare.html").write_text(report.html_page(title, sections, plots))
    return md


def _plot_best_curves(
    a: SweepRecord, b: SweepRecord, sa: Summary | None, sb: Summary | None, path: Path
) -> Path | None:
    from sweeps.plots import new_figure, save_png

    series = []
    for label, rec, s in (("A", a, sa), ("B", b, sb)):
        if s is not None and s.best is not None and s.curves.get(s.best.trial_id):
            series.append((f"{label}: {rec.sweep_id} best ({s.best.trial_id})", s.curves[s.best.trial_id], s))
    if not series:
        return None
    fig = new_figure(7, 4)
    ax = fig.add_subplot()
    for label, curve, _ in series:
        ax.plot([x for x, _ in curve], [y for _, y in curve], marker="o", markersize=3, label=label)
    ax.set_xlabel("training iteration")
    ax.set_ylabel(series[0][2].metric)
    ax.set_title("Best trial of each sweep")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_png(fig, path)


def cli_compare(args: argparse.Namespace) -> int:
    """``python -m sweeps compare SWEEP_A SWEEP_B [--out DIR]``."""
    rec_a, rec_b = store.load(args.sweep_a), store.load(args.sweep_b)
    if getattr(args, "out", None):
        out = Path(args.out)
    else:
        base = (rec_a.config.get("report") or {}).get("dir") or "reports"
        out = Path(base) / "compare" / f"{rec_a.sweep_id}__vs__{rec_b.sweep_id}"
    out = out.resolve()
    md = write_comparison(rec_a, rec_b, out)
    print(f"comparison of {rec_a.sweep_id} (A) and {rec_b.sweep_id} (B):")  # noqa: T201
    for p in sorted(out.iterdir()):
        print(f"  {p}")  # noqa: T201
    verdict = md.read_text().split("## Comparison", 1)[-1].split("\n|", 1)[0]
    for line in verdict.strip().splitlines():
        print(f"  {line.lstrip('- ')}")  # noqa: T201
    return 0


# --------------------------------------------------------------------------------------------------- list


def list_frame(records: list[SweepRecord]) -> Any:
    """Past sweeps, oldest first: id, experiment, date, status, best metric, trials."""
    import pandas as pd

    rows = []
    for r in records:
        metric, _ = _objective(r)
        value = (r.best or {}).get("value")
        best = f"{metric}={fmt(_num(value))}" if _num(value) is not None else "-"
        rows.append(
            {
                "sweep_id": r.sweep_id,
                "experiment": r.experiment,
                "date": report.date_text(r.created),
                "status": r.status,
                "best": best,
                "trials": (r.counts or {}).get("total", "-"),
            }
        )
    return pd.DataFrame(rows, columns=["sweep_id", "experiment", "date", "status", "best", "trials"])


def cli_list(args: argparse.Namespace) -> int:
    """``python -m sweeps list [--experiment NAME]``."""
    from sweeps import paths

    records = store.all_records()
    experiment = getattr(args, "experiment", None)
    if experiment:
        known = sorted({r.experiment for r in records})
        records = [r for r in records if r.experiment == experiment]
        if not records:
            raise BadInput(
                f"--experiment: no sweeps of {experiment!r}; experiments with sweeps: "
                f"{', '.join(known) or '(none)'}"
            )
    if not records:
        hint = f"no sweeps yet under {paths.index_dir()}; try `python -m sweeps run +experiment=quickstart`"
        print(hint)  # noqa: T201
        return 0
    print(list_frame(records).to_string(index=False))  # noqa: T201
    return 0
