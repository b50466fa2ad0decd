"""PNG plots of a :class:`~sweeps.summary.Summary` (matplotlib, Agg; no pyplot global state).

Each ``plot_*`` function draws from the summary only, writes one PNG and returns its path, or returns None
when there is nothing to draw (the reason goes to the caller's notes). NaN/inf values are never drawn as
points on the metric axis: they are counted in the title and marked along the bottom edge.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps.reports.summary import Row, Summary

log = logging.getLogger(__name__)

LOG_DISTS = ("loguniform", "qloguniform", "lograndint")
CATEGORICAL_DISTS = ("choice", "grid")
MAX_CURVES = 10
MAX_LINES = 2000  # parallel coordinates: draw the best trials only beyond this


def new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def save_png(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _is_categorical(name: str, rows: list[Row], space: Mapping[str, Any]) -> bool:
    spec = space.get(name) or {}
    if spec.get("dist") in CATEGORICAL_DISTS:
        return True
    return any(not _finite(r.params.get(name)) for r in rows if name in r.params)


def _categories(name: str, rows: list[Row], space: Mapping[str, Any]) -> list[Any]:
    spec = space.get(name) or {}
    cats: list[Any] = [str(v) for v in spec.get("values", [])]
    for r in rows:
        v = str(r.params.get(name))
        if name in r.params and v not in cats:
            cats.append(v)
    return cats


def _log_scale(name: str, rows: list[Row], space: Mapping[str, Any]) -> bool:
    spec = space.get(name) or {}
    return spec.get("dist") in LOG_DISTS


def plot_learning_curves(summ: Summary, path: Path) -> Path | None:
    """The sweep metric over training iterations for the leaderboard's trials (best first)."""
    curves = [(r, summ.curves.get(r.trial_id, ())) for r in summ.leaderboard[:MAX_CURVES]]
    curves = [(r, c) for r, c in curves if c]
    if not curves:
        return None
    fig = new_figure(7, 4.2)
    ax = fig.add_subplot()
    for rank, (row, curve) in enumerate(curves, 1):
        xs = [x for x, _ in curve]
        ys = [y if _finite(y) else math.nan for _, y in curve]  # NaN breaks the line: no fake value drawn
        label = f"#{rank} {row.trial_id} ({summ.metric}={row.best:.4g})"
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=2.2 if rank == 1 else 1.2, label=label)
    ax.set_xlabel("training iteration")
    ax.set_ylabel(summ.metric)
    ax.set_title(f"Learning curves of the top {len(curves)} trial(s) ({summ.mode})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save_png(fig, path)


def plot_metric_vs_params(summ: Summary, space: Mapping[str, Any], path: Path) -> Path | None:
    """One panel per hyperparameter: each trial's best metric against its value."""
    names = summ.param_names()
    rows = list(summ.rows)
    if not names or not rows:
        return None
    cols = min(3, len(names))
    nrows = math.ceil(len(names) / cols)
    fig = new_figure(4.2 * cols, 3.3 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False)
    best_id = summ.best.trial_id if summ.best else None
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        _param_panel(ax, name, summ, rows, space, best_id)
    for j in range(len(names), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(f"{summ.metric} ({summ.mode}) vs each hyperparameter")
    return save_png(fig, path)


def _param_panel(
    ax: Any, name: str, summ: Summary, rows: list[Row], space: Mapping[str, Any], best_id: str | None
) -> None:
    categorical = _is_categorical(name, rows, space)
    cats = _categories(name, rows, space) if categorical else []

    def x_of(r: Row) -> float:
        v = r.params.get(name)
        return float(cats.index(str(v))) if categorical else float(v)  # type: ignore[arg-type]

    have = [r for r in rows if name in r.params]
    good: list[Row] = []
    bad: list[Row] = []  # split in one pass (a membership test per trial took 9 s over 5,000 trials)
    for r in have:
        (good if _finite(r.best) and not r.failed else bad).append(r)
    ax.scatter([x_of(r) for r in good], [r.best for r in good], s=18, alpha=0.75, label="trials")
    best = [r for r in good if r.trial_id == best_id]
    if best:
        ax.scatter([x_of(best[0])], [best[0].best], s=90, marker="*", color="crimson", label="best", zorder=3)
    if bad:  # failed or NaN-only trials: marked on the bottom edge, never given a metric value
        ax.scatter(
            [x_of(r) for r in bad],
            [0.0] * len(bad),
            marker="x",
            color="grey",
            transform=ax.get_xaxis_transform(),
            clip_on=False,
            label="failed / NaN",
        )
    if categorical:
        ax.set_xticks(range(len(cats)), cats, fontsize=8)
    elif _log_scale(name, rows, space) and all(x_of(r) > 0 for r in have):
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on narrow log ranges
    ax.set_xlabel(name)
    ax.set_ylabel(f"best {summ.metric}")
    ax.grid(alpha=0.3)
    ax.set_title(f"{name}" + (f"  ({len(bad)} failed/NaN)" if bad else ""), fontsize=9)


def plot_importance(importances: Mapping[str, float], metric: str, path: Path) -> Path | None:
    """Horizontal bars: each hyperparameter's importance for the metric (sums to 1)."""
    if not importances:
        return None
    items = sorted(importances.items(), key=lambda kv: kv[1])
    fig = new_figure(6, 0.45 * len(items) + 1.4)
    ax = fig.add_subplot()
    ax.barh([k for k, _ in items], [v for _, v in items], color="tab:blue")
    for y, (_, v) in enumerate(items):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlabel("importance (fANOVA, Optuna)")
    ax.set_xlim(0, max(1.0, max(v for _, v in items) * 1.15))
    ax.set_title(f"Hyperparameter importance for {metric}")
    return save_png(fig, path)


def _axis_values(name: str, rows: list[Row], space: Mapping[str, Any]) -> tuple[list[float], list[str], bool]:
    """Each row's value of ``name`` scaled to [0, 1], the axis labels, and whether it is categorical.

    Labels: the categories (bottom to top) for a categorical axis, else (low, high).
    """
    if _is_categorical(name, rows, space):
        cats = _categories(name, rows, space)
        span = float(max(len(cats) - 1, 1))
        return [cats.index(str(r.params.get(name))) / span for r in rows], cats, True
    raw = [float(r.params[name]) for r in rows]
    log = _log_scale(name, rows, space) and all(v > 0 for v in raw)
    vals = [math.log10(v) for v in raw] if log else raw
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return [(v - lo) / span for v in vals], [f"{min(raw):.3g}", f"{max(raw):.3g}"], False


def _label_axis(ax: Any, x: int, ticks: list[str], categorical: bool) -> None:
    ax.axvline(x, color="black", linewidth=0.8)
    if not categorical:
        ax.text(x, -0.06, ticks[0], ha="center", va="top", fontsize=7)
        ax.text(x, 1.04, ticks[-1], ha="center", va="bottom", fontsize=7)
        return
    step = 1 / max(len(ticks) - 1, 1)
    for k, t in enumerate(ticks):
        ax.text(x + 0.03, k * step, t, ha="left", va="center", fontsize=7)


def plot_parallel_coordinates(summ: Summary, space: Mapping[str, Any], path: Path) -> Path | None:
    """One line per ranked trial across every hyperparameter axis and the metric, colored by the metric.

    Failed and NaN-only trials have no metric value, so they have no line (the title says how many).
    """
    by_id = {r.trial_id: r for r in summ.rows}
    rows = [by_id[t] for t in summ.ranked[:MAX_LINES]]
    names = [n for n in summ.param_names() if all(n in r.params for r in rows)]
    if len(rows) < 2 or not names:
        return None
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection

    axes: list[tuple[list[float], list[str], bool]] = [_axis_values(n, rows, space) for n in names]
    metric = [r.best for r in rows]
    lo, hi = min(metric), max(metric)
    span = (hi - lo) or 1.0
    axes.append(([(m - lo) / span for m in metric], [f"{lo:.4g}", f"{hi:.4g}"], False))
    good = [((m - lo) if summ.mode == "max" else (hi - m)) / span for m in metric]
    cmap = colormaps["viridis"]
    fig = new_figure(max(6.0, 1.6 * len(axes)), 4.5)
    ax = fig.add_subplot()
    xs = list(range(len(axes)))
    order = sorted(range(len(rows)), key=lambda i: good[i])  # the best is drawn last, on top
    lines = LineCollection([list(zip(xs, [a[0][i] for a in axes], strict=True)) for i in order],
                           colors=[cmap(good[i]) for i in order], alpha=0.8,
                           linewidths=[2.5 if i == 0 else 1.0 for i in order])  # one artist: 2,000 lines in 0.1 s
    ax.add_collection(lines)
    ax.autoscale_view()
    for x, (_, ticks, categorical) in zip(xs, axes, strict=True):
        _label_axis(ax, x, ticks, categorical)
    ax.set_xticks(xs, [*names, f"best {summ.metric}"], fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.12, 1.1)
    unranked = len(summ.rows) - len(summ.ranked)
    ax.set_title(
        f"Parallel coordinates: {len(rows)} ranked trial(s), brighter = better"
        + (f"; {unranked} failed/NaN not drawn" if unranked else ""),
        fontsize=10,
    )
    return save_png(fig, path)


def plot_schedules(summ: Summary, path: Path) -> Path | None:
    """PBT: each mutated hyperparameter's value over training iterations, one line per trial."""
    if not summ.schedules:
        return None
    names = sorted({n for s in summ.schedules.values() for n in s})
    iterations = {r.trial_id: r.iterations for r in summ.rows}
    fig = new_figure(6.5, 3.0 * len(names))
    axes = fig.subplots(len(names), 1, squeeze=False)
    for ax, name in zip((a[0] for a in axes), names, strict=True):
        for tid, sched in summ.schedules.items():
            points = [(x, v) for x, v in sched.get(name, ()) if _finite(v)]
            last = iterations.get(tid, 0)
            if points and last > points[-1][0]:  # hold the last value to the trial's end
                points.append((last, points[-1][1]))
            if points:
                ax.step(
                    [x for x, _ in points],
                    [v for _, v in points],
                    where="post",
                    marker="o",
                    markersize=3,
                    label=tid,
                )
        ax.set_xlabel("training iteration")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        values = [v for sched in summ.schedules.values() for _, v in sched.get(name, ()) if _finite(v)]
        if values and min(values) > 0 and max(values) >= 10 * min(values):  # PBT perturbs multiplicatively
            ax.set_yscale("log")
    fig.suptitle("Hyperparameter schedules (values changed during the trial)")
    return save_png(fig, path)


def write_plots(
    summ: Summary, space: Mapping[str, Any], importances: Mapping[str, float] | None, out_dir: Path
) -> tuple[list[Path], list[str]]:
    """Every plot that has something to show, as PNGs under ``out_dir``; returns (paths, notes)."""
    jobs = [
        ("learning_curves.png", lambda p: plot_learning_curves(summ, p), "no trial reported the metric"),
        ("metric_vs_params.png", lambda p: plot_metric_vs_params(summ, space, p), "no hyperparameters"),
        ("importance.png", lambda p: plot_importance(importances or {}, summ.metric, p), None),
        (
            "parallel_coordinates.png",
            lambda p: plot_parallel_coordinates(summ, space, p),
            "fewer than 2 ranked trials",
        ),
        ("schedules.png", lambda p: plot_schedules(summ, p), None),
    ]
    paths: list[Path] = []
    notes: list[str] = []
    for name, draw, why in jobs:
        try:
            p = draw(out_dir / name)
        except Exception as exc:  # one broken plot must not cost the report
            log.warning("plot %s failed: %s", name, exc)
            notes.append(f"{name}: not drawn ({exc})")
            continue
        if p is not None:
            paths.append(p)
        elif why:
            notes.append(f"{name}: not drawn ({why})")
    return paths, notes
