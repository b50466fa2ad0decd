"""Every Tune callback of a run of a sweep (a new one, an extension, a resumed one), by role.

The live callbacks are registered in the run's session (:mod:`sweeps.execution.run.session`); Tune's
``RunConfig`` gets a handle per role (plus Tune's result loggers, which Tune must see as such). A resumed
Tuner unpickles the handles of the run that made it, and they find what the resuming run registered here:
the same call builds both. The roles are fixed, so a handle of every role is in every sweep's ``tuner.pkl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweeps import paths, uris
from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput
from sweeps.execution.resources.plan import Plan, in_process
from sweeps.execution.run import control, firstreport, livestatus, schedstate, session, startup
from sweeps.execution.tuning.tuner import reuse_actors, train_dir
from sweeps.execution.warmstart import warm

if TYPE_CHECKING:
    from sweeps.store import SweepRecord

# In call order. The reaper before the keeper's sweeper: at the experiment's end its groups' removal stops the
# Train workers that the sweeper's clean-up would otherwise race.
WATCHERS = ("progress", "watchdog", "ledger", "census", "control", "live", "scheduler_state")
HOUSEKEEPERS = ("reaper", "donor_pins", "latest_kept", "sweeper", "pool", "trim")


def processes_per_trial(spec: SweepSpec, levers: warm.Levers) -> int:
    """Fresh processes a trial start takes: its Train controller, synchronization actor and workers, and
    its Tune trial actor unless Tune reuses one; a trial in its own process, that one only."""
    if in_process(spec):
        return 0 if reuse_actors(spec) else 1
    return 2 + spec.trainable.num_workers + (0 if levers.reuse else 1)


def register(spec: SweepSpec, plan: Plan, sweep_id: str, name: str, given: list[Any]) -> list[Any]:
    """Register the run ``name`` of the sweep's callbacks (``given`` first: the tracker) in a fresh session;
    return what goes into Tune's ``RunConfig``."""
    from sweeps.execution.tuning.tune_logs import result_loggers

    live = session.start(name)
    live.sweep = sweep_id
    live.callbacks["startup"] = startup.startup_callback(name)  # first: later ones see its startup/ metrics
    live.callbacks.update({f"given{i}": c for i, c in enumerate(given)})
    live.callbacks.update(watchers(spec, plan, sweep_id, name))
    live.callbacks.update(housekeepers(spec, plan, sweep_id, name))
    head = ["startup", *(f"given{i}" for i in range(len(given)))]
    return [*session.handles(name, [*head, *WATCHERS]), *result_loggers(), *session.handles(name, list(HOUSEKEEPERS))]


def watchers(spec: SweepSpec, plan: Plan, sweep_id: str, name: str) -> dict[str, Any]:
    """The status line, the stall watchdog, the hours ledger (from the hours the sweep's earlier runs held,
    saved to its record) and, on a remote cluster, the census of paused trials."""
    from sweeps import store
    from sweeps.execution.run.budget import Clock
    from sweeps.execution.run.concurrency import census_callback
    from sweeps.execution.run.hours import ledger_callback
    from sweeps.execution.run.progress import Progress, progress_callback
    from sweeps.execution.run.stall import Watch, watchdog_callback

    firstreport.arm()
    live = session.session(name)
    progress = Progress(spec.sweep.metric, spec.sweep.mode, plan.total_trials, spec.trainable.epochs,
                        str(paths.home() / "logs" / f"{name}.log"), spec.sweep.time_budget_s)
    try:
        own: SweepRecord | None = store.load(sweep_id)
    except BadInput:  # a Tuner built outside a recorded sweep (a benchmark, a test): nothing to save to
        own = None
    prior = (own.hours if own else None) or {}
    save = (lambda hours: store.update(sweep_id, hours=hours)) if own else None
    live.ledger.configure(spec.sweep.budget, plan.per_trial.get("CPU", 0.0), plan.per_trial.get("GPU", 0.0),
                          spec.trainable.epochs, (prior.get("cpu_used") or 0.0, prior.get("gpu_used") or 0.0),
                          trial_seconds(spec, plan, own))
    live.watch = Watch(sweep_id, plan.per_trial, spec.sweep.stall_timeout_s, name)
    # from 0: a resume or an extension carries the seconds the sweep counted before (carry_budget)
    live.clock = Clock(spec.sweep.time_budget_s, 0.0, control.idle_of(name))
    progress.clock = live.clock
    out = {"progress": progress_callback(progress, name), "watchdog": watchdog_callback(live.watch),
           "ledger": ledger_callback(live.ledger, save=save),
           "live": livestatus.callback(name, sweep_id, uris.join(spec.storage_path, name), plan.per_trial, progress,
                                       plan.total_trials)}
    out["scheduler_state"] = schedstate.callback(name, uris.join(spec.storage_path, name))
    out["census"] = census_callback(live.census)  # paused trials free their slots: the limit leaves them out
    return out


def carry_budget(name: str, counted_s: float) -> None:
    """A resume or an extension: its time budget goes on from the seconds the sweep's earlier runs counted
    (``counted_s``); the hours ledger carries its own."""
    clock = session.session(name).clock
    if clock is not None:
        clock.before_s = float(counted_s)


def housekeepers(spec: SweepSpec, plan: Plan, sweep_id: str, name: str) -> dict[str, Any]:
    """The checkpoint keeper (PBT pins, latest checkpoints kept for resume, clean-up), the placement-group
    reaper and the warm pool (when those levers are on), and the driver's heap trim (:mod:`.memtrim`)."""
    from sweeps.execution.run import memtrim
    from sweeps.execution.tuning import keeper
    from sweeps.execution.warmstart import pool, reaper

    levers = warm.current(spec.cluster.mode == "local")
    def on_donor(recipient: str, donor: str) -> None:  # the recipient's run and model name their donor
        tracker: Any = session.session(name).callbacks.get("given0")
        if tracker is not None and hasattr(tracker, "note_tags"):
            tracker.note_tags(recipient, {"sweeps.donor": donor})

    pins, latest, sweeper = keeper.callbacks(train_dir(spec, sweep_id), spec.checkpoint_num_to_keep,
                                             spec.sweep.metric, spec.sweep.mode, on_donor)
    out: dict[str, Any] = {"donor_pins": pins, "latest_kept": latest, "sweeper": sweeper,
                           "trim": memtrim.trim_callback()}
    if levers.lean:
        out["reaper"] = reaper.reaper_callback(sweep_id)
    if levers.pool and spec.cluster.mode == "local":
        out["pool"] = pool.pool_callback(processes_per_trial(spec, levers), plan.concurrent_trials, plan.total_trials)
    return out


def trial_seconds(spec: SweepSpec, plan: Plan, own: SweepRecord | None = None) -> float | None:
    """One trial's seconds (the budget's estimate before a trial ends in this run): from the sweep's own
    earlier runs when it has some (``resume``, ``extend``: its record), else the experiment's last sweep."""
    from sweeps import store

    cpus = plan.per_trial.get("CPU", 0.0)

    def one_trial_s(rec: SweepRecord | None) -> float | None:
        hours, trials = ((rec.hours or {}).get("cpu_used"), (rec.counts or {}).get("total")) if rec else (None, None)
        return float(hours * 3600 / trials / cpus) if hours and trials and cpus else None

    mine = one_trial_s(own)  # read first: the experiment's records are read only when the sweep has no price
    return mine if mine is not None else one_trial_s(store.latest_for(spec.sweep.name))
