"""The scheduler's state is the sweep's: saved with Tune's experiment state, put back before a resumed run decides.

Tune saves its trials and the search algorithm's state at every experiment checkpoint, and the state of any
callback that has one (``Callback.get_state``, written atomically beside the experiment state, on the same
cadence, to the same storage). The scheduler it restores on ``resume`` is the one pickled with the Tuner at
the start: ASHA's rungs, HyperBand's brackets, the median rule's history and PBT's population empty again, so
the first trial at each rung after a resume passed unopposed. This callback's state is the scheduler's:

- a scheduler with ``save``/``restore`` of its own (ASHA; promotion ASHA and PASHA, whose state is JSON by trial
  id) is saved through them (public);
- HyperBand, the median rule, PBT and PB2 through the ``scheduler_state`` lever (their attributes, trials by id);
- FIFO keeps nothing; any other scheduler, or one whose lever is off, starts empty and the resume says so.

It is put back at the resumed run's first step, once Tune has restored its trials (the state names them).
``extend`` puts an earlier experiment's saved state onto the new scheduler, so added trials are judged against
the trials already run.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from sweeps.execution.run import session

log = logging.getLogger(__name__)
MARK = "sweeps_scheduler_state"
LOST = "lost"  # a snapshot's key: why the scheduler's state could not be saved (a resume starts it empty)
STATELESS = ("FIFOScheduler",)


def _own_save(inner: Any) -> bool:
    from ray.tune.schedulers import TrialScheduler

    return type(inner).save is not TrialScheduler.save and type(inner).restore is not TrialScheduler.restore


def snapshot(inner: Any) -> dict[str, Any]:
    """The scheduler's state as this callback saves it (always a non-empty dict: Tune saves only those). Never
    raises: a state that cannot be saved is a snapshot without it, naming why (:data:`LOST`)."""
    from sweeps.execution.levers import core, scheduler_state

    kind = type(inner).__name__
    out: dict[str, Any] = {MARK: True, "kind": kind, "saved_at": time.time()}
    try:
        if _own_save(inner):
            return {**out, "how": "own", "data": _own_dump(inner)}
        if scheduler_state.handles(inner) and core.applies(scheduler_state.LEVER):
            return {**out, "how": "lever", "data": scheduler_state.dump(inner)}
    except Exception as exc:  # an attribute that does not pickle (a patch release): the sweep goes on without it
        return {**out, "how": "none", LOST: f"its state could not be saved ({type(exc).__name__}: {exc})"}
    return {**out, "how": "stateless" if kind in STATELESS else "none"}


def _own_dump(inner: Any) -> bytes:
    with tempfile.TemporaryDirectory(prefix="sweeps-sched-") as d:
        path = os.path.join(d, "scheduler.pkl")
        inner.save(path)
        with open(path, "rb") as f:
            return f.read()


def apply(inner: Any, state: Mapping[str, Any], trials: Mapping[str, Any]) -> str | None:
    """Put ``state`` onto ``inner``; None when done, else what will differ (one line). Never raises: a state that
    cannot be put back (unreadable, naming trials the run lacks, refused by the scheduler) is said, not fatal."""
    from sweeps.execution.levers import core, scheduler_state

    kind, how = state.get("kind"), state.get("how")
    if kind != type(inner).__name__:
        return f"the saved state is a {kind}'s, this sweep's scheduler a {type(inner).__name__}"
    if how == "stateless":
        return None
    if how == "own":
        try:
            _own_restore(inner, state["data"])
        except Exception as exc:  # unpickling, or the scheduler's own restore, failed
            return f"its saved state could not be put back ({type(exc).__name__}: {exc})"
        return None
    if how == "lever" and core.applies(scheduler_state.LEVER):
        try:
            scheduler_state.load(inner, state["data"], trials)
        except KeyError as exc:
            return f"its state names trial {exc} that is not in the restored experiment"
        except Exception as exc:  # a damaged or foreign state
            return f"its saved state could not be put back ({type(exc).__name__}: {exc})"
        return None
    if state.get(LOST):
        return str(state[LOST])
    why = core.reason(scheduler_state.LEVER) or "it has no save/restore of its own"
    return f"its state was not saved or cannot be put back ({why})"


def _own_restore(inner: Any, data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="sweeps-sched-") as d:
        path = os.path.join(d, "scheduler.pkl")
        with open(path, "wb") as f:
            f.write(data)
        inner.restore(path)


def differs(kind: str, why: str, run: str = "the resumed run") -> str:
    what = {"HyperBandScheduler": "its brackets", "HyperBandForBOHB": "its brackets",
            "MedianStoppingRule": "its history of results", "PopulationBasedTraining": "its population's scores and "
            "perturbation times", "PB2": "its population and its model of the parameters",
            "AsyncHyperBandScheduler": "its rungs", "ASHAScheduler": "its rungs",
            "PromotionASHA": "its rungs and promotions", "PASHA": "its rungs, promotions and current top rung",
            }.get(kind, "its state")
    after = "the added trials are" if "extension" in run else "trials after the resume are"
    return (f"the scheduler {kind} starts {run} with {what} empty ({why}): {after} not judged against the trials "
            f"before it")


def _keep_copy(experiment_dir: str, kept_at: float) -> float:
    """The experiment's state as it stands kept as the last good copy, at most every ``recovery.EVERY_S``: when
    the copy was last made."""
    from sweeps.execution.run import recovery

    if time.monotonic() - kept_at < recovery.EVERY_S:
        return kept_at
    try:
        if recovery.keep_state(experiment_dir):
            return time.monotonic()
    except Exception as exc:  # a copy is a safety net, never a reason to stop
        log.warning("could not keep a copy of the experiment state (%s); a damaged resume falls back to the "
                    "copy before", exc)
    return kept_at


def _not_put_back(checked: bool, pending: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The state a run is to put back at its first step, while it has not stepped: its scheduler has decided nothing,
    so that state is still the sweep's. A resumed run with no trial left never steps; saving its fresh scheduler
    instead handed an ``extend`` after it empty rungs (ci19: an added trial cut at rung 1)."""
    held = None if checked else pending or session.session(name).scheduler_from
    return None if held is None else {**held, "saved_at": time.time()}


def callback(name: str, experiment_dir: str) -> Any:
    """The Tune callback that saves the run ``name``'s scheduler with the experiment and puts it back on resume;
    it also keeps the last good copy of the experiment state (:mod:`.recovery`)."""
    from ray.tune import Callback

    class SchedulerState(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.pending: dict[str, Any] | None = None
            self.checked, self.kept_at = False, 0.0
            self.lost: str | None = None  # why the last snapshot holds no state (said once, when it changes)
            self.last: dict[str, Any] | None = None  # the last snapshot: a checkpoint after the scheduler is gone

        def _inner(self) -> Any:
            wrapper = session.session(name).scheduler
            return getattr(wrapper, "inner", None)

        def get_state(self) -> dict[str, Any] | None:
            """At each experiment checkpoint, once Tune staged its new state (storage holds the set before, whole:
            it becomes the last good one, at most every ``EVERY_S``)."""
            self.kept_at = _keep_copy(experiment_dir, self.kept_at)
            if (held := _not_put_back(self.checked, self.pending, name)) is not None:
                self.last = held
                return held
            inner = self._inner()
            if inner is None:  # the run's session already ended: the state it last had, never none at all
                return self.last
            state = self.last = snapshot(inner)
            if state.get(LOST) != self.lost:
                self.lost = state.get(LOST)
                if self.lost:
                    log.warning("%s; the sweep goes on", differs(type(inner).__name__, self.lost,
                                                                  "a resume of this sweep"))
            return state

        def set_state(self, state: dict[str, Any]) -> None:
            self.pending = state

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            if self.checked:
                return
            self.checked = True
            inner, live = self._inner(), session.session(name)
            state = self.pending or live.scheduler_from
            if inner is None or not (live.resumed or state):
                return
            if state is None:
                kind = type(inner).__name__
                if kind not in STATELESS:
                    lost = live.scheduler_lost or "no scheduler state was saved before the stop"
                    log.warning("%s", differs(kind, lost))
                return
            why = apply(inner, state, {t.trial_id: t for t in [*trials, *live.earlier_trials]})
            if why:
                log.warning("%s", differs(type(inner).__name__, why,
                                          "the resumed run" if live.resumed else "the extension"))
            else:
                log.info("the scheduler %s continues from its state of %s%s", type(inner).__name__,
                         time.strftime("%H:%M:%S", time.localtime(state.get("saved_at", 0))), _population(inner))

    return SchedulerState()


def _population(inner: Any) -> str:
    """``; population {trial: (score, last perturbation)}`` for PBT and PB2, else ""."""
    from sweeps.execution.levers import core, scheduler_state

    if not core.applies(scheduler_state.LEVER):
        return ""
    try:
        found = scheduler_state.population(inner)
        return f"; population {json.dumps(dict(sorted(found.items())))}" if found else ""
    except Exception as exc:  # a log line's detail, never a reason to stop the resumed run
        log.debug("could not describe the restored population (%s)", exc)
        return ""


def saved_state(experiment_dirs: list[str]) -> dict[str, Any] | None:
    """The scheduler state the newest of ``experiment_dirs`` that holds one saved (``extend``): the last saved
    (``saved_at``) of its readable callback-state files and the one kept with its last good state set; None when
    none has one."""
    for experiment_dir in reversed(experiment_dirs):
        found = _saved_in(experiment_dir)
        if found is not None:
            return found
    return None


def _saved_in(experiment_dir: str) -> dict[str, Any] | None:
    import ray.cloudpickle as cloudpickle

    from sweeps import uris
    from sweeps.execution.levers import tune_files
    from sweeps.execution.run import recovery

    blobs = [(n, lambda n=n: uris.read_bytes(uris.join(experiment_dir, n)))
             for n in recovery.newest(experiment_dir, tune_files.CALLBACK_PREFIX)]
    kept = recovery.kept_set(experiment_dir)
    blobs += [(n, lambda d=d: d) for n, d in (kept.files.items() if kept else ()) if
              n.startswith(tune_files.CALLBACK_PREFIX)]
    found: list[tuple[float, str, dict[str, Any]]] = []
    for file_name, read in blobs:
        try:
            states = cloudpickle.loads(read())
        except Exception as exc:  # a damaged file: an older one, or the kept one, may do
            log.warning("could not read %s of %s (%s)", file_name, experiment_dir, exc)
            continue
        found += [(float(state.get("saved_at", 0.0)), file_name, state)
                  for state in tune_files.callback_states_of(states) if state.get(MARK)]
    if not found:
        return None
    saved_at, file_name, state = max(found, key=lambda f: f[0])  # the last saved, whichever run's file holds it
    log.debug("the scheduler state of %s saved at %s (%s)", experiment_dir, saved_at, file_name)
    return state
