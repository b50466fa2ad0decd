"""``resume`` (continue an interrupted sweep) and ``extend`` (add trials to a finished one).

Both rebuild the spec from the sweep's stored overrides (plus any new ones) and refuse when what defines
the sweep changed (search space, metric, mode, scheduler, searcher, trainable: the config digest).
Both reuse the sweep's MLflow parent run and its child runs: no duplicates. Both carry what the sweep knows into
the new run: the scheduler's state with the trials it names (from every experiment of the sweep), the trials of
the earlier experiments for the status line, the hours and the seconds the sweep's budgets counted so far.
"""

from __future__ import annotations

import logging
from typing import Any

from sweeps import store, uris
from sweeps.errors import BadInput
from sweeps.lease import driver_id
from sweeps.ops import run as runner
from sweeps.ops.heartbeat import claim, refuse_if_live
from sweeps.ops.launch import launched
from sweeps.ops.prepare import spec_for
from sweeps.tracking import client as mc

log = logging.getLogger(__name__)


def _reopen_parent(c: Any, rec: store.SweepRecord) -> None:
    if not rec.parent_run_id:
        return
    c.update_run(rec.parent_run_id, status="RUNNING")
    c.set_tag(rec.parent_run_id, mc.RUN_TAG_DRIVER, driver_id())


def resume(sweep_id: str, retry_errored: bool = False, extra: list[str] | None = None) -> runner.Outcome:
    """Continue an interrupted sweep from Tune's saved experiment state.

    Finished trials are kept; unfinished ones continue from their last checkpoint; errored ones are
    resumed from their last checkpoint when ``retry_errored``. The searcher's state is restored by Tune, the
    scheduler's by the sweep (:mod:`sweeps.execution.run.schedstate`).
    """
    from sweeps.execution.levers.tune_files import CALLBACK_PREFIX
    from sweeps.execution.run import recovery
    from sweeps.execution.run.owner import Run, can_restore

    rec = store.load(sweep_id)
    exp_dir = rec.experiment_dirs[-1]
    refuse_if_live(rec, "resume")
    if rec.status == "finished" and not retry_errored:
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} already finished; use `python -m sweeps extend "
                       f"{rec.sweep_id} --more-trials N` to add trials, or --retry-errored to rerun errored ones")
    spec = spec_for(rec, extra or [])
    notes = recovery.repair(exp_dir, rec.sweep_id)  # the last good copy back, or one line saying why not (exit 2)
    if not can_restore(exp_dir):
        raise BadInput(recovery.way_out(rec.sweep_id, f"no resumable Tune state in {exp_dir} (the driver died "
                                                      f"before Tune saved its first snapshot)"))
    lost = [n for n in notes if n.startswith(CALLBACK_PREFIX) and "no good copy" in n]
    with launched(spec) as (the_plan, c):
        _reopen_parent(c, rec)
        rec = claim(rec.sweep_id, status="running", live_state="")
        tracker = runner.make_tracker(spec, rec)  # the same parent run: the trials' runs are reused
        run = Run.restore(spec, the_plan, rec.sweep_id, rec.experiment_dirs, [tracker], counted_s=rec.counted_s,
                          retry_errored=retry_errored,
                          scheduler_lost="its saved state was damaged and no good copy was kept" if lost else None)
        log.info("resuming sweep %s from %s", rec.sweep_id, exp_dir)
        return runner.fit_and_finish(spec, rec, run, tracker, c)


def extend(sweep_id: str, more_trials: int, extra: list[str] | None = None) -> runner.Outcome:
    """Add ``more_trials`` trials to a finished sweep, suggested by its restored searcher and judged by its
    scheduler's state. An interrupted sweep whose Tune state cannot be restored (damaged, no good copy) is
    extended too: that is its way out (its damaged files are set aside, its trials stay in its results)."""
    from sweeps.execution.run import recovery
    from sweeps.execution.run.owner import Run

    if more_trials < 1:
        raise BadInput(f"--more-trials: must be >= 1, got {more_trials}")
    rec = store.load(sweep_id)
    refuse_if_live(rec, "extend")
    if rec.status in ("running", "interrupted"):  # "running" with no live driver: one that was killed
        why = recovery.unrestorable(rec.experiment_dirs[-1])
        if why is None:
            raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} was interrupted; `python -m sweeps resume "
                           f"{rec.sweep_id}` finishes it, then extend")
        aside = recovery.set_aside(rec.experiment_dirs[-1])
        log.warning("sweep %s cannot be resumed (%s)%s: the extension continues its search in a new experiment",
                    rec.sweep_id, why, f"; set aside: {', '.join(aside)}" if aside else "")
    spec = spec_for(rec, extra or [])
    _refuse_spent_time(spec, rec)
    generation = len(rec.experiment_dirs)
    name = f"{rec.sweep_id}-ext{generation}"
    before = rec
    new_dir = uris.join(spec.storage_path, name)
    with launched(spec) as (the_plan, c):
        searcher = _searcher(spec, rec.experiment_dirs, generation)
        try:
            _reopen_parent(c, rec)
            rec = claim(rec.sweep_id, status="running", live_state="", experiment_dirs=[*rec.experiment_dirs, new_dir])
            tracker = runner.make_tracker(spec, rec)
            run = Run.extend(spec, the_plan, rec.sweep_id, rec.experiment_dirs, [tracker], searcher=searcher,
                             more_trials=more_trials, counted_s=rec.counted_s)
            log.info("extending sweep %s by %d trial(s) (%s searcher restored from %s)", rec.sweep_id,
                     more_trials, spec.searcher_name, rec.experiment_dirs[-2])
            return runner.fit_and_finish(spec, rec, run, tracker, c)
        finally:
            _roll_back_unstarted(before, new_dir, c)


def _refuse_spent_time(spec: Any, rec: store.SweepRecord) -> None:
    """A time budget is the sweep's across its runs: an extension of a sweep that spent it would run nothing."""
    budget, used = spec.sweep.time_budget_s, rec.counted_s
    if budget is not None and used >= budget:
        raise BadInput(f"sweep.time_budget_s: sweep {rec.sweep_id} has spent its time budget ({used:.0f} s of "
                       f"{budget:g} s; the budget counts every run of the sweep); raise it to extend: `python -m "
                       f"sweeps extend {rec.sweep_id} --more-trials N sweep.time_budget_s={int(used) + 600}`")


def _searcher(spec: Any, experiment_dirs: list[str], generation: int) -> Any:
    """The searcher restored from the newest experiment whose saved searcher reads; a fresh one (said) if none."""
    from sweeps.execution.tuning import searchers

    for experiment_dir in reversed(experiment_dirs):
        try:
            return searchers.restored_searcher(spec, 0, experiment_dir, generation=generation)
        except Exception as exc:  # damaged or missing: an earlier experiment's may do
            log.debug("the searcher of %s could not be restored (%s)", experiment_dir, exc)
    log.warning("no saved state of the %s searcher could be read: it starts afresh (its suggestions do not know "
                "the trials so far)", spec.searcher_name)
    return searchers.build_searcher(spec, 0)


def _roll_back_unstarted(before: store.SweepRecord, new_dir: str, c: Any) -> None:
    """An extension stopped before Tune saved any state leaves the sweep as it was: finished, extendable."""
    from sweeps.execution.run.owner import can_restore

    if can_restore(new_dir):
        return
    store.update(before.sweep_id, status=before.status, experiment_dirs=before.experiment_dirs,
                 lease_expires=None)
    try:
        c.set_terminated(before.parent_run_id, status="FINISHED")
    except Exception as exc:
        log.warning("MLflow: could not close the parent run again (%s); `sweeps sync` does", exc)
    log.warning("the extension of %s stopped before it started a trial; the sweep is unchanged (status %s)",
                before.sweep_id, before.status)
