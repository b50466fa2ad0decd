"""``resume`` (continue an interrupted sweep) and ``extend`` (add trials to a finished one).

Both rebuild the spec from the sweep's stored overrides (plus any new ones) and refuse when what defines
the sweep changed (search space, metric, mode, scheduler, searcher, trainable: the config digest).
Both reuse the sweep's MLflow parent run and its child runs: no duplicates.
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
    resumed from their last checkpoint when ``retry_errored``. The searcher's state is restored by Tune.
    """
    from ray import tune

    from sweeps.execution.tuning import callbacks, keeper, recovery, session
    from sweeps.execution.tuning import tuner as tuner_mod

    rec = store.load(sweep_id)
    exp_dir = rec.experiment_dirs[-1]
    refuse_if_live(rec, "resume")
    if rec.status == "finished" and not retry_errored:
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} already finished; use `python -m sweeps extend "
                       f"{rec.sweep_id} --more-trials N` to add trials, or --retry-errored to rerun errored ones")
    spec = spec_for(rec, extra or [])
    recovery.repair(exp_dir)  # damaged state: the last good copy back, or one line saying why not (exit 2)
    if not tune.Tuner.can_restore(exp_dir):
        raise BadInput(f"SWEEP_ID: no resumable Tune state in {exp_dir} (the driver died before Tune saved "
                       f"its first snapshot); start the sweep again")
    with launched(spec) as (the_plan, c):
        _reopen_parent(c, rec)
        rec = claim(rec.sweep_id, status="running")
        # A killed driver's last saved state may name a latest checkpoint that Tune deleted after saving it.
        keeper.restore_kept(exp_dir)
        tracker = runner.make_tracker(spec, rec)
        # The restored Tuner's callbacks are handles (sweeps.execution.tuning.session): registered here first,
        # the tracker (same parent run), the status line, the watchdog and the hours ledger (from the hours the
        # sweep held so far: a budget is the sweep's, across resume and extend) are this run's.
        run_name = uris.basename(exp_dir)
        callbacks.register(spec, the_plan, rec.sweep_id, run_name, [tracker])
        session.session(run_name).extras["resumed"] = True  # the scheduler's saved state comes back
        tuner = tune.Tuner.restore(exp_dir, trainable=tuner_mod.trainable(spec, rec.sweep_id),
                                   resume_unfinished=True, resume_errored=retry_errored, restart_errored=False)
        log.info("resuming sweep %s from %s", rec.sweep_id, exp_dir)
        return runner.fit_and_finish(spec, rec, tuner, tracker, c)


def extend(sweep_id: str, more_trials: int, extra: list[str] | None = None) -> runner.Outcome:
    """Add ``more_trials`` trials to a finished sweep, suggested by its restored searcher."""
    from sweeps.execution.tuning import searchers
    from sweeps.execution.tuning import tuner as tuner_mod

    if more_trials < 1:
        raise BadInput(f"--more-trials: must be >= 1, got {more_trials}")
    rec = store.load(sweep_id)
    refuse_if_live(rec, "extend")
    if rec.status == "running":
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} is still running or was interrupted; "
                       f"finish it first with `python -m sweeps resume {rec.sweep_id}`")
    if rec.status == "interrupted":
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} was interrupted; `python -m sweeps resume "
                       f"{rec.sweep_id}` finishes it, then extend")
    spec = spec_for(rec, extra or [])
    generation = len(rec.experiment_dirs)
    name = f"{rec.sweep_id}-ext{generation}"
    before = rec
    new_dir = uris.join(spec.storage_path, name)
    with launched(spec) as (the_plan, c):
        searcher = searchers.restored_searcher(spec, 0,
                                               rec.experiment_dirs[-1], generation=generation)
        try:
            _reopen_parent(c, rec)
            rec = claim(rec.sweep_id, status="running", experiment_dirs=[*rec.experiment_dirs, new_dir])
            tracker = runner.make_tracker(spec, rec)
            tuner = tuner_mod.build_tuner(spec, the_plan, rec.sweep_id, [tracker], searcher=searcher,
                                          num_samples=more_trials, name=name)
            carry_scheduler(name, rec.experiment_dirs[-2])
            log.info("extending sweep %s by %d trial(s) (%s searcher restored from %s)", rec.sweep_id,
                     more_trials, spec.searcher_name, rec.experiment_dirs[-2])
            return runner.fit_and_finish(spec, rec, tuner, tracker, c)
        finally:
            _roll_back_unstarted(before, new_dir, c)


def _roll_back_unstarted(before: store.SweepRecord, new_dir: str, c: Any) -> None:
    """An extension stopped before Tune saved any state leaves the sweep as it was: finished, extendable."""
    from ray import tune

    try:
        started = tune.Tuner.can_restore(new_dir)
    except Exception:  # an unreadable folder holds no Tune state either
        started = False
    if started:
        return
    store.update(before.sweep_id, status=before.status, experiment_dirs=before.experiment_dirs,
                 lease_expires=None)
    try:
        c.set_terminated(before.parent_run_id, status="FINISHED")
    except Exception as exc:
        log.warning("MLflow: could not close the parent run again (%s); `sweeps sync` does", exc)
    log.warning("the extension of %s stopped before it started a trial; the sweep is unchanged (status %s)",
                before.sweep_id, before.status)


def carry_scheduler(name: str, earlier_dir: str) -> None:
    """``extend``: the new run's scheduler starts from the one the sweep's last run saved, with that run's
    trials, so the added trials are judged against the trials already run."""
    from ray.tune import ExperimentAnalysis

    from sweeps.execution.tuning import schedstate, session

    state = schedstate.saved_state(earlier_dir)
    extras = session.session(name).extras
    extras["scheduler_from"] = state
    if state is not None and state.get("how") == "lever":
        try:
            extras["earlier_trials"] = ExperimentAnalysis(earlier_dir).trials
        except Exception as exc:  # the state's trials are not readable: the scheduler starts empty, said once
            log.warning("could not read the trials of %s (%s)", earlier_dir, exc)
