"""``compare``: a side-by-side report of two sweeps (compare.md, compare.html and a plot), from stored results."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps.config import stored
from sweeps.reports.formats import html_page, md_table
from sweeps.reports.load import NoResults, load_sweep
from sweeps.reports.outline import Section, Table, date_text, fmt, num
from sweeps.reports.summary import Summary
from sweeps.reports.write import complete
from sweeps.store import SweepRecord

log = logging.getLogger(__name__)


SKIP_CONFIG_DIFF = ("search_space", "hydra")  # search_space has its own table


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{key}."))
        else:
            out[key] = v
    return out


def _delta(a: Any, b: Any) -> str:
    fa, fb = num(a), num(b)
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
    value = num(b.get("value"))
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

    ma, mb = stored.of(a), stored.of(b)
    rows: list[tuple[str, Any, Any]] = [
        ("sweep", a.sweep_id, b.sweep_id),
        ("experiment", a.experiment, b.experiment),
        ("started", date_text(a.created), date_text(b.created)),
        ("status", a.status, b.status),
        ("objective", f"{ma.metric} ({ma.mode})", f"{mb.metric} ({mb.mode})"),
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
    ca, cb = stored.of(a), stored.of(b)
    metric_a, mode, metric_b = ca.metric, ca.mode, cb.metric
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
    space_a, space_b = stored.of(a).space, stored.of(b).space
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
    # the whole stored configs, key by key: what differs, whether or not a later stage reads it
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
        *_fronts(a, b),
    ]


def _fronts(a: SweepRecord, b: SweepRecord) -> list[Section]:
    """Multi-objective sweeps: each one's Pareto front, side by side."""
    objs = stored.of(b).objectives
    if not objs or not (a.pareto or b.pareto):
        return []
    rows = [[label, p["trial_id"], *(fmt(v) for v in p["values"])]
            for label, rec in (("A", a), ("B", b)) for p in rec.pareto if p["rank"] == 1 and p["feasible"]]
    return [Section("Pareto fronts", [f"objectives: {', '.join(f'{o.metric} ({o.mode})' for o in objs)}"],
                    [Table(["sweep", "trial", *(o.metric for o in objs)], rows)])]


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
    return records, complete(rec, records, summ)


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
            lines += md_table(t) + [""]
    md = out_dir / "compare.md"
    md.write_text("\n".join(lines))
    plots = []
    try:
        plot = _plot_best_curves(rec_a, rec_b, sa, sb, out_dir / "compare_best_curves.png")
        plots = [plot] if plot else []
    except Exception as exc:  # a plot failure must not cost the comparison
        log.warning("comparison plot failed: %s", exc)
    (out_dir / "compare.html").write_text(html_page(title, sections, plots))
    return md


def _plot_best_curves(
    a: SweepRecord, b: SweepRecord, sa: Summary | None, sb: Summary | None, path: Path
) -> Path | None:
    from sweeps.reports.plots import new_figure, save_png

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
