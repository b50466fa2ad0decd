"""Confirmed winners: each re-run configuration's mean, spread and 95% confidence interval over its seeds.

A sweep's best trial is often its luckiest seed. ``sweeps confirm`` re-runs the top-k configurations with N
fresh seeds at the full budget; here (pure, no I/O) each configuration gets the mean, the sample standard
deviation and the t-based 95% interval of the sweep metric (each seed's best finite value, the rule the sweep
ranked by), ranked by the interval's pessimistic end (the lower bound when higher is better).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.reports.outline import Section, Table, fmt
from sweeps.reports.rows import best_value
from sweeps.trials import config_digest


@dataclass(frozen=True)
class Interval:
    digest: str
    params: dict[str, Any]
    values: tuple[float, ...]
    mean: float
    std: float
    low: float
    high: float
    pessimistic: float  # ``low`` when higher is better, else ``high``

    @property
    def n(self) -> int:
        return len(self.values)


def interval(values: Sequence[float], mode: str) -> tuple[float, float, float, float, float]:
    """(mean, std, low, high, pessimistic) of a 95% t-interval; with one value the interval is unbounded."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n) if n > 1 else math.inf
    low, high = mean - half, mean + half
    return mean, std, low, high, (low if mode == "max" else high)


def intervals(records: Sequence[Any], metric: str, mode: str) -> list[Interval]:
    """One interval per configuration (grouped by config digest), best pessimistic end first."""
    groups: dict[str, tuple[dict[str, Any], list[float]]] = {}
    for rec in records:
        if rec.status == "ERROR":
            continue
        value = best_value(rec.values(metric), mode)
        if not math.isfinite(value):
            continue
        params = {k: v for k, v in rec.params.items() if k != "seed"}
        groups.setdefault(config_digest(params), (params, []))[1].append(value)
    out = [Interval(d, p, tuple(v), *interval(v, mode)) for d, (p, v) in groups.items()]
    return sorted(out, key=lambda i: -i.pessimistic if mode == "max" else i.pessimistic)


def winner_note(found: Sequence[Interval], sweep_best_params: dict[str, Any] | None) -> str | None:
    """Says so when the sweep's best trial's configuration is not the confirmed winner."""
    if not found or sweep_best_params is None:
        return None
    best = config_digest({k: v for k, v in sweep_best_params.items() if k != "seed"})
    if found[0].digest == best:
        return "the sweep's best configuration is also the confirmed winner"
    return (f"the sweep's best trial ({best}) is NOT the confirmed winner: {found[0].digest} has the better "
            f"pessimistic bound over its seeds")


def section(found: Sequence[Interval], metric: str, mode: str, note: str | None) -> Section:
    if not found:
        return Section("Confirmed", ["no configuration was confirmed yet (python -m sweeps confirm SWEEP_ID)"])
    end = "lower" if mode == "max" else "upper"
    rows = [[str(i), c.digest, ", ".join(f"{k}={fmt(v)}" for k, v in c.params.items()), str(c.n), fmt(c.mean),
             fmt(c.std), f"[{fmt(c.low)}, {fmt(c.high)}]", fmt(c.pessimistic)] for i, c in enumerate(found, 1)]
    bullets = [f"each configuration re-run with fresh seeds at the full budget; ranked by the {end} end of the "
               f"95% t-interval of {metric}", *([note] if note else [])]
    headers = ["rank", "config", "parameters", "seeds", "mean", "std", "95% CI", f"{end} bound"]
    return Section("Confirmed", bullets, [Table(headers, rows)])


def plot(found: Sequence[Interval], metric: str, path: Path) -> Path | None:
    """The intervals as error bars, best first."""
    if not found:
        return None
    from sweeps.reports.plots import new_figure, save_png

    fig = new_figure(7, 0.6 * len(found) + 1.8)
    ax = fig.add_subplot()
    ys = list(range(len(found)))[::-1]
    for y, c in zip(ys, found, strict=True):
        finite = math.isfinite(c.low) and math.isfinite(c.high)
        ax.errorbar([c.mean], [y], xerr=[[c.mean - c.low], [c.high - c.mean]] if finite else None, fmt="o",
                    capsize=4)
        ax.scatter(list(c.values), [y] * c.n, s=10, alpha=0.5)
    ax.set_yticks(ys, [f"{c.digest} (n={c.n})" for c in found])
    ax.set_xlabel(f"{metric}: mean and 95% CI over seeds")
    ax.set_title("Confirmed configurations")
    ax.grid(alpha=0.3)
    return save_png(fig, path)
