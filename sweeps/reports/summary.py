"""collect(records) -> Summary: pure, no I/O. Renderers live in :mod:`sweeps.reports.formats` and
:mod:`sweeps.reports.plots`; one trial's row comes from :mod:`sweeps.reports.rows`.

Rules:
- NaN/inf values never count as best: a trial's ``best`` is its best *finite* value (NaN when it has none),
  and a trial without one is never ranked. A trial that reported a non-finite value is flagged ``nonfinite``.
- Failed trials (status ERROR) are listed, never ranked.
- Ties on the best value go to the trial that reached it at the earlier training iteration, then to the trial
  earlier in the list; the other tied trials are named in ``Summary.ties``.
- ``compute_saved``: the share of the full budget (``max_epochs`` per trial) that early stopping did not
  spend: ``sum(max_epochs - epochs reached)`` over early-stopped trials, over ``max_epochs * trials``.
- ``efficiency = T_ideal / T_observed``, ``T_ideal`` = the trials' training time (the trainable's
  ``time/compute_s + time/data_s``, else Tune's time between reports, which holds each report's checkpoint
  save and no start-up) spread over the ``slots`` that could run at once; ``T_observed`` = the sweep's wall
  time. ``Summary.train_s_from`` says which of the two clocks the figure rests on.
- ``Summary.split()``: the slot-seconds (``slots`` x wall time) spent starting trials (every start measured by
  the orchestrator, ``startup/total_s`` less the first epoch and the wait for room), training, and the rest
  (waiting).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeps.config.stored import StoredSweep
from sweeps.reports.results import TrialRecord
from sweeps.reports.rows import (  # noqa: F401 - re-exported: the summary's vocabulary
    CLOCK_WORDS,
    CONFIG_PREFIX,
    DATA_FRAC,
    NONFINITE_FLAG,
    TRAINABLE_CLOCK,
    TUNE_CLOCK,
    Row,
    Schedule,
    _finite,
    best_value,
    pooled_train_s,
    to_row,
)


@dataclass(frozen=True)
class Summary:
    metric: str
    mode: str
    rows: tuple[Row, ...]
    best: Row | None
    leaderboard: tuple[Row, ...]
    counts: dict[str, int]
    epochs_trained: int
    epochs_budget: int | None
    compute_saved: float | None  # share of the full-budget epochs that early stopping did not spend
    train_s_total: float
    wall_s: float | None
    slots: int | None
    efficiency: float | None  # T_ideal / T_observed
    extras: dict[str, Any] = field(default_factory=dict)
    top_k: int = 5
    max_epochs: int | None = None
    ranked: tuple[str, ...] = ()  # every rankable trial id, best first
    ties: tuple[str, ...] = ()  # other trials whose best equals the winner's
    failed: tuple[Row, ...] = ()
    compute_saved_epochs: int | None = None
    compute_saved_s: float | None = None  # estimated training seconds early stopping saved
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None
    cpu_s_total: float | None = None
    gpu_s_total: float | None = None
    t_ideal_s: float | None = None
    curves: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # leaderboard trials
    schedules: dict[str, Schedule] = field(default_factory=dict)  # trials whose hyperparameters changed
    data_bound: tuple[str, ...] = ()
    train_s_from: tuple[str, ...] = ()  # the clocks behind train_s_total: TRAINABLE_CLOCK and/or TUNE_CLOCK
    start_s_total: float | None = None  # every measured start's seconds to its first batch (None: none measured)
    starts_measured: int = 0

    def split(self) -> tuple[float, float, float] | None:
        """The shares of the sweep's slot-seconds (``slots`` x wall time) spent starting trials (each start
        until its first batch, less its wait for room: ``startup/total_s`` less ``first_epoch`` and
        ``pg_wait``), training (``train_s_total``) and neither (waiting: for room, slots with no trial, trials
        between epochs, reporting, ending); None when no start was measured or the wall time or slots are
        unknown."""
        if self.start_s_total is None or not self.wall_s or not self.slots:
            return None
        whole = self.slots * self.wall_s
        starting, training = min(self.start_s_total / whole, 1.0), min(self.train_s_total / whole, 1.0)
        training = min(training, 1.0 - starting)
        return starting, 1.0 - starting - training, training

    def split_words(self) -> str:
        """``starting 61%, waiting 8%, training 31%``, or "" when :meth:`split` has no figures."""
        shares = self.split()
        if shares is None:
            return ""
        return ", ".join(f"{w} {v:.0%}" if v >= 0.1 or v == 0 else f"{w} {v:.1%}"
                         for w, v in zip(("starting", "waiting", "training"), shares, strict=True))

    def rank_of(self, trial_id: str) -> int | None:
        """1-based rank, or None for a trial that is not ranked (failed, or no finite value)."""
        try:
            return self.ranked.index(trial_id) + 1
        except ValueError:
            return None

    def param_names(self) -> list[str]:
        """Every hyperparameter seen, in first-seen order."""
        names: dict[str, None] = {}
        for r in self.rows:
            names.update(dict.fromkeys(r.params))
        return list(names)


def _key(r: Row, index: int, mode: str) -> tuple[float, float, int]:
    score = -r.best if mode == "max" else r.best
    return (score, r.best_step if r.best_step is not None else math.inf, index)


def rank(rows: list[Row], mode: str) -> list[Row]:
    """Rankable rows (not failed, finite best), best first; ties: earlier best_step, then list order."""
    ok = [(i, r) for i, r in enumerate(rows) if not r.failed and _finite(r.best)]
    return [r for i, r in sorted(ok, key=lambda p: _key(p[1], p[0], mode))]


def _counts(rows: list[Row]) -> dict[str, int]:
    return {
        "total": len(rows),
        "completed": sum(r.status == "TERMINATED" and not r.early_stopped for r in rows),
        "early_stopped": sum(r.status == "TERMINATED" and r.early_stopped for r in rows),
        "failed": sum(r.failed for r in rows),
        "unfinished": sum(r.status not in ("TERMINATED", "ERROR") for r in rows),
        "nonfinite": sum(r.nonfinite for r in rows),
        "data_bound": sum(r.data_bound for r in rows),
    }


def _saved(rows: list[Row], max_epochs: int | None) -> tuple[float | None, int | None, float | None]:
    """(share of budget saved, epochs saved, estimated training seconds saved) by early stopping."""
    if not max_epochs or not rows:
        return None, None, None
    epochs, seconds = 0, 0.0
    for r in rows:
        if not r.early_stopped or r.failed:
            continue
        left = max(max_epochs - r.iterations, 0)  # Tune's count of reports, not the loop's own epoch
        epochs += left
        if r.epochs_run:
            seconds += left * r.train_s / r.epochs_run
    return epochs / (max_epochs * len(rows)), epochs, seconds


def _curve(rec: TrialRecord, metric: str) -> tuple[tuple[int, float], ...]:
    return tuple(
        (int(h.get("training_iteration", i)), float(h[metric]))
        for i, h in enumerate(rec.history, 1)
        if metric in h
    )


def _total(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def collect(
    records: list[TrialRecord],
    metric: str,
    mode: str,
    *,
    top_k: int = 5,
    max_epochs: int | None = None,
    wall_s: float | None = None,
    slots: int | None = None,
    cpus_per_trial: float | None = None,
    gpus_per_trial: float | None = None,
    schedules: Mapping[str, Schedule] | None = None,
) -> Summary:
    """Summarize a sweep's trials.

    Args:
        records: the trials (any status).
        metric, mode: the sweep's objective (``mode`` is ``min`` or ``max``).
        top_k: leaderboard length.
        max_epochs: the full budget per trial (for the compute early stopping saved).
        wall_s: the sweep's observed wall time; slots: trials that could run at once (for efficiency).
        cpus_per_trial, gpus_per_trial: a trial's resources (driver + workers), for CPU/GPU-seconds.
        schedules: ``{trial_id: {param: ((iteration, value), ...)}}`` read from Tune's results (PBT);
            without it, ``config/<name>`` keys in the history rows are used when present.

    Example:
        >>> s = collect(records, "val/acc", "max", max_epochs=8, wall_s=97.0, slots=2)
        >>> s.best.trial_id, s.counts["failed"], s.efficiency
    """
    rows = pooled_train_s([to_row(r, metric, mode, cpus=cpus_per_trial, gpus=gpus_per_trial,
                                  schedule=(schedules or {}).get(r.trial_id)) for r in records])
    ranked = rank(rows, mode)
    best = ranked[0] if ranked else None
    leaders = ranked[:top_k]
    saved, saved_epochs, saved_s = _saved(rows, max_epochs)
    train_total = sum(r.train_s for r in rows)
    t_ideal = train_total / slots if slots else None
    by_id = {r.trial_id: r for r in records}
    return Summary(
        metric=metric, mode=mode, rows=tuple(rows), best=best, leaderboard=tuple(leaders), counts=_counts(rows),
        epochs_trained=sum(r.epochs_run for r in rows), epochs_budget=max_epochs * len(rows) if max_epochs else None,
        compute_saved=saved, train_s_total=train_total, wall_s=wall_s, slots=slots,
        efficiency=t_ideal / wall_s if t_ideal is not None and wall_s else None, top_k=top_k,
        max_epochs=max_epochs, ranked=tuple(r.trial_id for r in ranked),
        ties=tuple(r.trial_id for r in ranked[1:] if best is not None and r.best == best.best),
        failed=tuple(r for r in rows if r.failed), compute_saved_epochs=saved_epochs, compute_saved_s=saved_s,
        cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
        cpu_s_total=_total(r.cpu_s for r in rows), gpu_s_total=_total(r.gpu_s for r in rows), t_ideal_s=t_ideal,
        curves={r.trial_id: _curve(by_id[r.trial_id], metric) for r in leaders if r.trial_id in by_id},
        schedules={r.trial_id: r.schedule for r in rows if r.schedule},
        data_bound=tuple(r.trial_id for r in rows if r.data_bound),
        train_s_from=tuple(c for c in (TRAINABLE_CLOCK, TUNE_CLOCK) if any(r.train_s_from == c for r in rows)),
        **_starts(records),
    )


def _starts(records: Iterable[TrialRecord]) -> dict[str, Any]:
    """``start_s_total`` and ``starts_measured``: every start's first result holds ``startup/total_s``
    (sweeps.execution.run.startup); its starting seconds leave out the first epoch (training) and the
    placement-group wait (waiting for room)."""
    from sweeps.execution.run.startup import TOTAL, metric

    seconds = [h[TOTAL] - h.get(metric("first_epoch"), 0.0) - h.get(metric("pg_wait"), 0.0)
               for r in records for h in r.history if TOTAL in h]
    return {"start_s_total": sum(seconds) if seconds else None, "starts_measured": len(seconds)}


def recollect(summ: Summary, records: list[TrialRecord], **changes: Any) -> Summary:
    """``collect`` again with the settings ``summ`` was built with, some of them changed."""
    settings: dict[str, Any] = {
        "top_k": summ.top_k,
        "max_epochs": summ.max_epochs,
        "wall_s": summ.wall_s,
        "slots": summ.slots,
        "cpus_per_trial": summ.cpus_per_trial,
        "gpus_per_trial": summ.gpus_per_trial,
    }
    settings.update(changes)
    return collect(records, summ.metric, summ.mode, **settings)


def settings_of(sweep: StoredSweep) -> dict[str, Any]:
    """``collect`` keyword arguments that a stored sweep determines (top_k, epoch budget, per-trial resources)."""
    return {
        "top_k": sweep.report.top_k,
        "max_epochs": sweep.epochs,
        "cpus_per_trial": sweep.cpus_per_trial,
        "gpus_per_trial": sweep.gpus_per_trial,
    }
