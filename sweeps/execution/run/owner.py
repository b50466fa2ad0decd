"""The one owner of a running sweep: it builds, restores or extends the sweep's Tuner, fits it, and stops it.

:meth:`Run.new`, :meth:`Run.restore` and :meth:`Run.extend` are the three ways a run of a sweep begins, and each
registers the run's callbacks and its live state (its session) in one place. :meth:`Run.fit` runs Tune's loop;
:meth:`Run.request_stop` is how anything stops it (an operator's ``stop``, the stall watchdog, SIGTERM, a host
program): Tune's loop ends as after Ctrl-C, its state saved and its unfinished trials resumable, from any thread
and without a signal (the ``tune_interrupt`` lever; its public fallback is the sweep's Stopper). :meth:`Run.beat`
is the run's heartbeat (called from the lease thread, whatever Tune's loop is doing): the live status's lease and
the writes that failed. :meth:`Run.outcome` is what the run saw; :meth:`Run.end` forgets its live state.

``sweeps.ops`` keeps the sweep's record, lease and MLflow parent run and asks this class for the rest: it never
imports Ray Tune.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sweeps import uris
from sweeps.config.spec import SweepSpec
from sweeps.execution.resources.plan import Plan
from sweeps.execution.run import callbacks, control, livestatus, recovery, schedstate, session
from sweeps.execution.run.session import Outcome
from sweeps.execution.tuning import tune_logs

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One run of a sweep (a new one, a resume, an extension, a confirmation): its Tuner and its live state."""

    spec: SweepSpec
    sweep_id: str
    name: str  # the Tune run's name, the key of its session: the sweep id, or its extension's/confirmation's
    tuner: Any

    @property
    def live(self) -> session.Session:
        return session.session(self.name)

    # -- the three beginnings ------------------------------------------------------------------------------------
    @classmethod
    def new(cls, spec: SweepSpec, plan: Plan, sweep_id: str, given: list[Any], *,
            points: list[dict[str, Any]] | None = None, searcher: Any = None, num_samples: int | None = None,
            name: str | None = None, max_trials: int | None = None) -> Run:
        """A fresh Tuner for the sweep (``given``: its tracker), or with ``name`` a confirmation's."""
        from sweeps.execution.run.assembly import new_tuner

        name = name or sweep_id
        tuner = new_tuner(spec, plan, sweep_id, name, given, points=points, searcher=searcher,
                          num_samples=num_samples, max_trials=max_trials)
        recovery.keep_tuner(uris.join(spec.storage_path, name))  # a good copy of tuner.pkl for a damaged resume
        return cls(spec, sweep_id, name, tuner)

    @classmethod
    def restore(cls, spec: SweepSpec, plan: Plan, sweep_id: str, experiment_dirs: list[str], given: list[Any], *,
                counted_s: float, retry_errored: bool = False, scheduler_lost: str | None = None) -> Run:
        """The sweep's interrupted run from Tune's saved state (the last of ``experiment_dirs``): finished trials
        kept, unfinished ones continue from their last checkpoint; the callbacks (handles in ``tuner.pkl``) find
        this run's; the scheduler's saved state and the budgets' counts (``counted_s``) come back."""
        from ray import tune

        from sweeps.execution.tuning import keeper
        from sweeps.execution.tuning import tuner as tuner_mod

        exp_dir = experiment_dirs[-1]
        name = uris.basename(exp_dir)
        keeper.restore_kept(exp_dir)  # a killed driver's state may name a latest checkpoint Tune deleted
        tuner_mod.limit_pending(plan)  # as the first run did: Tune queues no more trials than run at once
        callbacks.register(spec, plan, sweep_id, name, given)
        live = session.session(name)
        live.resumed = True
        live.earlier_trials = earlier_trials(experiment_dirs[:-1])  # an interrupted extension's
        live.scheduler_lost = scheduler_lost
        callbacks.carry_budget(name, counted_s)
        tuner = tune.Tuner.restore(exp_dir, trainable=tuner_mod.trainable(spec, sweep_id), resume_unfinished=True,
                                   resume_errored=retry_errored, restart_errored=False)
        return cls(spec, sweep_id, name, tuner)

    @classmethod
    def extend(cls, spec: SweepSpec, plan: Plan, sweep_id: str, experiment_dirs: list[str], given: list[Any], *,
               searcher: Any, more_trials: int, counted_s: float) -> Run:
        """``more_trials`` new trials in a new experiment (the last of ``experiment_dirs``), suggested by the
        sweep's restored ``searcher`` and judged by its scheduler's saved state, with the earlier trials."""
        name = uris.basename(experiment_dirs[-1])
        run = cls.new(spec, plan, sweep_id, given, searcher=searcher, num_samples=more_trials, name=name,
                      max_trials=more_trials)
        carry_scheduler(name, experiment_dirs[:-1])
        callbacks.carry_budget(name, counted_s)
        run.live.planned = len(session.earlier(name)) + more_trials
        return run

    # -- while it runs -----------------------------------------------------------------------------------------
    def fit(self) -> Outcome:
        """Tune's loop, until every trial ended or a stop was asked (then its state is saved first): what the
        run saw."""
        with control.fitting(self.name), tune_logs.without_tensorboard():
            self.tuner.fit()
        return self.outcome()

    def request_stop(self, now: bool = True, why: str = "requested") -> None:
        """Stop the run: at once (``now``), or once every running trial saved a checkpoint again (as ``sweeps
        stop`` does); resumable either way where the ``tune_interrupt`` lever applies."""
        if now:
            control.request_stop(self.name, why)
            return
        control.stop_after_checkpoints(self.name, why)

    def interrupt(self) -> bool:
        """End Tune's loop as Ctrl-C does (SIGTERM's way in): False where the lever is off (nothing done)."""
        return control.interrupt(self.name)

    def beat(self) -> None:
        """The run's heartbeat (the lease thread): the live status's lease renewed, failed writes retried."""
        livestatus.beat(self.name)

    # -- after -------------------------------------------------------------------------------------------------
    def outcome(self) -> Outcome:
        return session.outcome(self.name)

    def end(self) -> None:
        session.end(self.name)


def can_restore(experiment_dir: str) -> bool:
    """Whether Tune saved a state there that a resume can continue (an unreadable folder holds none)."""
    from ray import tune

    try:
        return bool(tune.Tuner.can_restore(experiment_dir))
    except Exception:  # noqa: BLE001 - an unreadable folder holds no Tune state either
        return False


def earlier_trials(experiment_dirs: list[str]) -> list[Any]:
    """Tune's trials of the sweep's earlier experiments (each over: a trial a scheduler left PAUSED counts as
    TERMINATED, as the reports count it), read from their saved states; an unreadable one is left out, said."""
    from sweeps.execution.levers import tune_trials

    out: list[Any] = []
    for experiment_dir in experiment_dirs:
        try:
            trials = tune_trials.trials(experiment_dir)
        except Exception as exc:  # a damaged or missing state: those trials are not counted here
            log.warning("could not read the trials of %s (%s): the status line and the scheduler leave them out",
                        experiment_dir, exc)
            continue
        for t in trials:
            if t.status == "PAUSED":
                t.set_status("TERMINATED")
        out.extend(trials)
    return out


def carry_scheduler(name: str, earlier_dirs: list[str]) -> None:
    """``extend``: the new run's scheduler starts from the state the sweep's last run saved, with the trials of
    every earlier experiment (the state names them by id: an earlier extension's state names the first run's
    trials too), so the added trials are judged against the trials already run."""
    live = session.session(name)
    state = schedstate.saved_state(earlier_dirs)
    live.scheduler_from = state
    live.earlier_trials = earlier_trials(earlier_dirs)
    inner = getattr(live.scheduler, "inner", None)
    if state is None and inner is not None and type(inner).__name__ not in schedstate.STATELESS:
        log.warning("%s", schedstate.differs(type(inner).__name__, "the sweep's earlier runs saved no scheduler "
                                                                   "state", run="the extension"))
