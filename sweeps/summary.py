"""collect(records) -> Summary: pure, no I/O. Renderers live in :mod:`sweeps.report` and :mod:`sweeps.plots`.

Rules:
- NaN/inf values never count as best: a trial's ``best`` is its best *finite* value (NaN when it has none),
  and a trial without one is never ranked. A trial that reported a non-finite value is flagged ``nonfinite``.
- Failed trials (status ERROR) are listed, never ranked.
- Ties on the best value go to the trial that reached it at the earlier training iteration, then to the trial
  earlier in the list; the other tied trials are named in ``Summary.ties``.
- ``compute_saved``: the share of the full budget (``max_epochs`` per trial) that early stopping did not
  spend: ``sum(max_epochs - epochs reached)`` over early-stopped trials, over ``max_epochs * trials``.
- ``efficiency = T_ideal / T_observed``, ``T_ideal`` = the trials' pure training time (the trainable's
  ``time/compute_s + time/data_s``, else Tune's ``time_this_iter_s``) spread over the ``slots`` that could
  run at once; ``T_observed`` = the sweep's wall time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeps.results import TrialRecord

DATA_FRAC = "time/data_frac"
NONFINITE_FLAG = "sweeps/nonfinite"  # same as sweeps.trial.NONFINITE_FLAG
DATA_BOUND_FRAC = 0.5  # a trial whose loop waits on data more than half the time, on average
CONFIG_PREFIX = "config/"  # history keys that carry a trial's (possibly mutated) hyperparameters

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
    train_s: float  # pure training time: the loop's data + compute seconds, as reported by the trainable
    nonfinite: bool
    error: str | None
    epochs_run: int = 0  # reports received: the epochs of work actually done (PBT jumps count once)
    best_step: int | None = None  # the training iteration at which ``best`` was reached
    cpu_s: float | None = None  # wall_s x the trial's CPUs (driver + workers)
    gpu_s: float | None = None
    data_frac: float | None = None  # mean share of the loop's time spent waiting on data
    data_bound: bool = False
    schedule: Schedule = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status == "ERROR"


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


def _scan(history: Sequence[Mapping[str, float]], metric: str, mode: str) -> _Scan:
    # Locals, not attribute writes: this loop runs once per history row (200,000 times for 10,000 trials).
    best, best_step, final, nonfinite = math.nan, None, math.nan, False
    epochs, iterations, wall, train, iter_s, frac_sum, frac_n = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0
    is_max, isfinite = mode == "max", math.isfinite
    for i, h in enumerate(history, 1):
        get = h.get
        step = get("training_iteration", i)
        if step > iterations:
            iterations = step
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
    train_s = s.train_s if s.train_s > 0.0 else s.iter_s
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
        epochs_run=len(rec.history),
        best_step=s.best_step,
        cpu_s=wall * cpus if cpus is not None else None,
        gpu_s=wall * gpus if gpus is not None else None,
        data_frac=data_frac,
        data_bound=data_frac is not None and data_frac > DATA_BOUND_FRAC,
        schedule=schedule if schedule is not None else _schedule_from_history(rec.history),
    )


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
        left = max(max_epochs - r.epochs, 0)
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
    rows = [
        to_row(
            r,
            metric,
            mode,
            cpus=cpus_per_trial,
            gpus=gpus_per_trial,
            schedule=(schedules or {}).get(r.trial_id),
        )
        for r in records
    ]
    ranked = rank(rows, mode)
    best = ranked[0] if ranked else None
    ties = tuple(r.trial_id for r in ranked[1:] if best is not None and r.best == best.best)
    leaders = ranked[:top_k]
    saved, saved_epochs, saved_s = _saved(rows, max_epochs)
    train_total = sum(r.train_s for r in rows)
    t_ideal = train_total / slots if slots else None
    efficiency = t_ideal / wall_s if t_ideal is not None and wall_s else None
    by_id = {r.trial_id: r for r in records}
    return Summary(
        metric=metric,
        mode=mode,
        rows=tuple(rows),
        best=best,
        leaderboard=tuple(leaders),
        counts=_counts(rows),
        epochs_trained=sum(r.epochs_run for r in rows),
        epochs_budget=max_epochs * len(rows) if max_epochs else None,
        compute_saved=saved,
        train_s_total=train_total,
        wall_s=wall_s,
        slots=slots,
        efficiency=efficiency,
        top_k=top_k,
        max_epochs=max_epochs,
        ranked=tuple(r.trial_id for r in ranked),
        ties=ties,
        failed=tuple(r for r in rows if r.failed),
        compute_saved_epochs=saved_epochs,
        compute_saved_s=saved_s,
        cpus_per_trial=cpus_per_trial,
        gpus_per_trial=gpus_per_trial,
        cpu_s_total=_total(r.cpu_s for r in rows),
        gpu_s_total=_total(r.gpu_s for r in rows),
        t_ideal_s=t_ideal,
        curves={r.trial_id: _curve(by_id[r.trial_id], metric) for r in leaders if r.trial_id in by_id},
        schedules={r.trial_id: r.schedule for r in rows if r.schedule},
        data_bound=tuple(r.trial_id for r in rows if r.data_bound),
    )


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


def trial_resources(config: Mapping[str, Any]) -> tuple[float, float]:
    """(CPUs, GPUs) one trial holds, from a composed config: driver_cpus + num_workers x per-worker."""
    trainable = config.get("trainable") or {}
    cluster = config.get("cluster") or {}
    workers = float(trainable.get("num_workers") or 1)
    per_worker = trainable.get("resources_per_worker") or {}
    cpu = float(per_worker.get("CPU", 1))
    gpu = float(per_worker.get("GPU", 1 if trainable.get("use_gpu") else 0))
    return float(cluster.get("driver_cpus", 1)) + workers * cpu, workers * gpu


def settings_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``collect`` keyword arguments that a sweep's stored config determines (top_k, budget, resources)."""
    cpus, gpus = trial_resources(config)
    epochs = ((config.get("trainable") or {}).get("params") or {}).get("epochs")
    top_k = (config.get("report") or {}).get("top_k", 5)
    return {
        "top_k": int(top_k) if isinstance(top_k, int) else 5,
        "max_epochs": epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None,
        "cpus_per_trial": cpus,
        "gpus_per_trial": gpus,
    }


MIN_IMPORTANCE_TRIALS = 3
MAX_IMPORTANCE_TRIALS = (
    3000  # beyond this, an evenly spaced sample over the ranking (fANOVA's forest is slow)
)


def _optuna_distribution(spec: Mapping[str, Any], observed: list[Any]) -> Any:
    """A search-space entry (``{dist: loguniform, low, high}``) -> an Optuna distribution covering
    ``observed``."""
    from optuna import distributions as d

    dist = spec.get("dist")
    if dist in ("choice", "grid") or not all(_finite(v) for v in observed):
        values = [_categorical(v) for v in [*spec.get("values", []), *observed]]
        return d.CategoricalDistribution(list(dict.fromkeys(values)))
    lo, hi = min(observed), max(observed)
    if _finite(spec.get("low")) and _finite(spec.get("high")):
        lo, hi = min(lo, spec["low"]), max(hi, spec["high"])
    log = dist in ("loguniform", "qloguniform", "lograndint") and lo > 0
    if dist in ("randint", "qrandint", "lograndint") and all(float(v).is_integer() for v in observed):
        return d.IntDistribution(int(math.floor(lo)), int(math.ceil(hi)), log=log)
    return d.FloatDistribution(float(lo), float(hi), log=log)


def _categorical(v: Any) -> Any:
    return v if v is None or isinstance(v, bool | int | float | str) else str(v)


def param_importances(
    summ: Summary, space: Mapping[str, Any], seed: int = 0
) -> tuple[dict[str, float], str | None]:
    """Hyperparameter importance for the sweep metric (Optuna's fANOVA) over the ranked trials.

    An in-memory Optuna study is built from the trials that have a finite best value and are not failed
    (early-stopped trials count, with the best value they reached); parameters come from ``space`` (the
    sweep's declarative search space) plus any other parameter that varies. Returns ``({}, why)`` when it
    cannot say anything (fewer than 3 such trials, or nothing varies).
    """
    by_id = {r.trial_id: r for r in summ.rows}
    rows = [by_id[t] for t in summ.ranked]
    if len(rows) < MIN_IMPORTANCE_TRIALS:
        return (
            {},
            f"needs at least {MIN_IMPORTANCE_TRIALS} finished trials with a finite {summ.metric}, "
            f"got {len(rows)}",
        )
    if len(rows) > MAX_IMPORTANCE_TRIALS:
        rows = rows[:: math.ceil(len(rows) / MAX_IMPORTANCE_TRIALS)]
    names = [
        n
        for n in summ.param_names()
        if all(n in r.params for r in rows) and len({repr(r.params[n]) for r in rows}) > 1
    ]
    if not names:
        return {}, "no hyperparameter varies across the finished trials"
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances
    from optuna.trial import create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {n: _optuna_distribution(space.get(n) or {}, [r.params[n] for r in rows]) for n in names}
    study = optuna.create_study(direction="maximize" if summ.mode == "max" else "minimize")
    study.add_trials(
        [
            create_trial(
                params={n: _categorical(r.params[n]) for n in names}, distributions=dists, value=r.best
            )
            for r in rows
        ]
    )
    try:
        result = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed), normalize=True)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        return {}, f"Optuna could not evaluate importances ({exc})"
    return {k: float(v) for k, v in result.items()}, None
