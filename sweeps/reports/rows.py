"""One trial's summary row from its history: a single pass over the rows Tune recorded (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeps import preemptions
from sweeps.reports.results import TrialRecord

DATA_FRAC = "time/data_frac"


NONFINITE_FLAG = "sweeps/nonfinite"  # same as sweeps.trial.NONFINITE_FLAG


DATA_BOUND_FRAC = 0.5  # a trial whose loop waits on data more than half the time, on average


CONFIG_PREFIX = "config/"  # history keys that carry a trial's (possibly mutated) hyperparameters


# Where a row's train_s came from: the loop's own timing metrics, or Tune's time between reports (a loop
# without them): the latter holds each report's checkpoint save and hand-over, and no start-up.
TRAINABLE_CLOCK = "trainable"
TUNE_CLOCK = "tune"
CLOCK_WORDS = {  # how the report names them
    TRAINABLE_CLOCK: "the trainable's own time/compute_s + time/data_s",
    TUNE_CLOCK: "Tune's time between reports: checkpoint saves included, start-ups left out",
}

# {param: ((iteration, value), ...)}: only the parameters whose value changed during the trial (PBT).
Schedule = dict[str, tuple[tuple[int, Any], ...]]


@dataclass(frozen=True)
class Row:
    trial_id: str
    status: str
    params: dict[str, Any]
    best: float  # the best finite value; NaN when the trial has none
    final: float  # the last reported value, as reported (NaN/inf kept)
    iterations: int
    epochs: int  # the last epoch reached
    early_stopped: bool
    wall_s: float
    train_s: float  # training time: the loop's own data + compute seconds, else Tune's clock (see train_s_from)
    nonfinite: bool
    error: str | None
    epochs_run: int = 0  # reports received: the epochs of work actually done (PBT jumps count once)
    best_step: int | None = None  # the training iteration at which ``best`` was reached
    cpu_s: float | None = None  # wall_s x the trial's CPUs (driver + workers)
    gpu_s: float | None = None
    data_frac: float | None = None  # mean share of the loop's time spent waiting on data
    data_bound: bool = False
    schedule: Schedule = field(default_factory=dict)
    error_file: str | None = None  # where the failed trial's traceback is
    steady_s: float | None = None  # Tune clock: the median time between consecutive reports (no start-up)
    unsteady_starts: int = 0  # Tune clock, no steady report: starts whose time is start-up + one epoch
    train_s_from: str = TRAINABLE_CLOCK  # TRAINABLE_CLOCK (time/compute_s + time/data_s) or TUNE_CLOCK
    preemptions: int | None = None  # node preemptions the trial's loop counted (None: it said nothing)
    epochs_lost: int | None = None  # reported epochs redone after those preemptions (sweeps.preemptions)

    @property
    def failed(self) -> bool:
        return self.status == "ERROR"


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def best_value(values: list[float], mode: str) -> float:
    finite = [v for v in values if _finite(v)]
    if not finite:
        return math.nan
    return max(finite) if mode == "max" else min(finite)


@dataclass
class _Scan:
    """One pass over a trial's history rows (the hot loop of :func:`collect`)."""

    best: float = math.nan
    best_step: int | None = None
    final: float = math.nan
    nonfinite: bool = False
    epochs: int = 0
    iterations: int = 0
    wall_s: float = 0.0
    train_s: float = 0.0
    iter_s: float = 0.0
    frac_sum: float = 0.0
    frac_n: int = 0
    steady: tuple[float, ...] = ()  # Tune's time between reports, for reports that did not follow a (re)start
    starts: int = 0  # reports that came first after a (re)start of the trial (their time includes start-up)


def _scan(history: Sequence[Mapping[str, float]], metric: str, mode: str) -> _Scan:
    # Locals, not attribute writes: this loop runs once per history row (200,000 times for 10,000 trials).
    best, best_step, final, nonfinite = math.nan, None, math.nan, False
    epochs, iterations, wall, train, iter_s, frac_sum, frac_n = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0
    steady: list[float] = []
    starts = 0
    is_max, isfinite = mode == "max", math.isfinite
    for i, h in enumerate(history, 1):
        get = h.get
        step = get("training_iteration", i)
        if step > iterations:
            iterations = step
        if get("iterations_since_restore", 2 if i > 1 else 1) <= 1:
            starts += 1
        else:
            steady.append(get("time_this_iter_s", 0.0))
        e = get("epoch", 0.0)
        if e > epochs:
            epochs = e
        t = get("time_total_s", 0.0)
        if t > wall:
            wall = t
        train += get("time/compute_s", 0.0) + get("time/data_s", 0.0)
        iter_s += get("time_this_iter_s", 0.0)
        if get(NONFINITE_FLAG):  # the trial bridge replaced a NaN/inf sweep metric (sweeps.trial.sanitize)
            nonfinite = True
        frac = get(DATA_FRAC)
        if frac is not None and isfinite(frac):
            frac_sum += frac
            frac_n += 1
        v = get(metric)
        if v is None:
            continue
        final = v
        if not isfinite(v):
            nonfinite = True
        elif best_step is None or (v > best if is_max else v < best):
            best, best_step = float(v), int(step)
    return _Scan(
        best,
        best_step,
        float(final),
        nonfinite,
        int(epochs),
        int(iterations),
        float(wall),
        train,
        iter_s,
        frac_sum,
        frac_n,
        tuple(steady),
        starts,
    )


def _schedule_from_history(history: Sequence[Mapping[str, float]]) -> Schedule:
    """``config/<name>`` keys in history rows -> the schedule of each parameter that changed."""
    if not history:
        return {}
    names = [k for k in history[0] if k.startswith(CONFIG_PREFIX)]
    out: dict[str, list[tuple[int, Any]]] = {}
    for i, h in enumerate(history, 1):
        step = int(h.get("training_iteration", i))
        for k in names:
            if k not in h:
                continue
            seq = out.setdefault(k[len(CONFIG_PREFIX) :], [])
            if not seq or seq[-1][1] != h[k]:
                seq.append((step, h[k]))
    return {k: tuple(v) for k, v in out.items() if len(v) > 1}


def _tune_train_s(s: _Scan) -> float:
    """Pure training time from Tune's own clock: the time between consecutive reports, with each first
    report after a (re)start (which also holds the start-up) counted as the trial's median steady report."""
    if not s.steady:
        return s.iter_s  # a single report per start: start-up cannot be told apart (an upper bound)
    return sum(s.steady) + s.starts * statistics.median(s.steady)


def to_row(
    rec: TrialRecord,
    metric: str,
    mode: str,
    *,
    cpus: float | None = None,
    gpus: float | None = None,
    schedule: Schedule | None = None,
) -> Row:
    """One trial record -> its summary row (pure)."""
    s = _scan(rec.history, metric, mode)
    spot = preemptions.tally(rec.history)
    own = s.train_s > 0.0
    train_s = s.train_s if own else _tune_train_s(s)
    data_frac = s.frac_sum / s.frac_n if s.frac_n else None
    wall = float(s.wall_s)
    return Row(
        trial_id=rec.trial_id,
        status=rec.status,
        params=dict(rec.params),
        best=s.best,
        final=float(s.final),
        iterations=s.iterations,
        epochs=s.epochs or s.iterations,
        early_stopped=rec.early_stopped,
        wall_s=wall,
        train_s=train_s,
        nonfinite=s.nonfinite,
        error=rec.error,
        error_file=rec.error_file,
        epochs_run=len(rec.history),
        best_step=s.best_step,
        cpu_s=wall * cpus if cpus is not None else None,
        gpu_s=wall * gpus if gpus is not None else None,
        data_frac=data_frac,
        data_bound=data_frac is not None and data_frac > DATA_BOUND_FRAC,
        schedule=schedule if schedule is not None else _schedule_from_history(rec.history),
        steady_s=statistics.median(s.steady) if s.steady and not own else None,
        unsteady_starts=s.starts if not s.steady and not own else 0,
        train_s_from=TRAINABLE_CLOCK if own else TUNE_CLOCK,
        preemptions=spot.preemptions if spot.known else None,
        epochs_lost=spot.epochs_lost if spot.known else None,
    )


def pooled_train_s(rows: Sequence[Row]) -> list[Row]:
    """Trials stopped after one report per start (ASHA's first rung) have no steady report: their only time is
    start-up plus one epoch. Their training time is taken as one steady report of the sweep's other trials
    (the median of their medians) per start; with no such trial it stays the upper bound it is."""
    import dataclasses

    medians = [r.steady_s for r in rows if r.steady_s is not None]
    if not medians:
        return list(rows)
    typical = statistics.median(medians)
    return [dataclasses.replace(r, train_s=r.unsteady_starts * typical) if r.unsteady_starts else r for r in rows]
