"""Tune's public wrapper pattern for a sweep's own rules: a search algorithm and a scheduler around Ray's.

Tune's own ``ConcurrencyLimiter`` wraps a ``Searcher``; random/grid search (``BasicVariantGenerator``) is a
``SearchAlgorithm``, and a scheduler a ``TrialScheduler``: :class:`GatedVariants` and :class:`SweepScheduler`
wrap those through their public interfaces only, delegating every call, and add the sweep's gates:

- the search algorithm asks its gates before each new trial (a cluster that holds fewer trials now, an
  hour budget that admits no more; a gate may also say the sweep is done);
- the scheduler asks its gates before Tune starts or resumes any trial (a full cluster, a paused sweep), and
  its ``stops`` before a running trial's result is judged (a trial an operator stopped).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from typing import Any

from sweeps.execution.run import startup

GATED_STATE = "sweeps-gated-state-"  # beside Tune's searcher state: how many trials a capped generator handed out
# A search gate gets the live trial ids; it answers "go", "wait" or "done".
SearchGate = Callable[[set[str]], str]
# A start gate gets Tune's controller; True lets the scheduler choose a trial to start now.
StartGate = Callable[[Any], bool]


def gated_variants(inner: Any, gates: list[SearchGate]) -> Any:
    """``inner`` (a ``BasicVariantGenerator``) asking ``gates`` before every new trial."""
    from ray.tune.search import SearchAlgorithm

    class GatedVariants(_Gated, SearchAlgorithm):  # type: ignore[misc]
        """A search algorithm that delegates to Tune's random/grid generator, behind the sweep's gates; with
        ``limit`` it hands out at most that many trials (``extend --more-trials N`` on a grid)."""

    delegate(GatedVariants, ("add_configurations", "on_trial_result", "has_checkpoint"))
    return GatedVariants(inner, gates)


class _Gated:
    """The body of :func:`gated_variants`' search algorithm (public calls of Tune's generator only)."""

    def __init__(self, inner: Any, gates: list[SearchGate]) -> None:
        self.inner, self.gates = inner, gates
        self.started: list[Callable[[Any], None]] = []  # told of every trial it hands out
        self.live: set[str] = set()
        self.limit: int | None = None
        self.handed = 0
        self.done = False  # its own flag: Tune's SearchAlgorithm keeps one under a private name
        self.halted: Callable[[], bool] | None = None  # finished for as long as it says so (:func:`halting`)

    @property
    def metric(self) -> Any:
        return self.inner.metric

    @property
    def total_samples(self) -> int:
        total = int(self.inner.total_samples)
        return total if self.limit is None else min(total, self.limit)

    def set_search_properties(self, metric: Any, mode: Any, config: dict[str, Any], **spec: Any) -> bool:
        return bool(self.inner.set_search_properties(metric, mode, config, **spec))

    def next_trial(self) -> Any:
        if self.limit is not None and self.handed >= self.limit:
            self.set_finished()
            return None
        answers = [gate(set(self.live)) for gate in self.gates]
        if "done" in answers:
            self.set_finished()
            return None
        if "wait" in answers:
            return None
        trial = self.inner.next_trial()
        if trial is not None:
            self.handed += 1
            self.live.add(trial.trial_id)
            for told in self.started:
                told(trial)
        return trial

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.inner.on_trial_complete(trial_id, result=result, error=error)

    def is_finished(self) -> bool:
        return bool(self.done or self.inner.is_finished() or (self.halted is not None and self.halted()))

    def set_finished(self) -> None:
        self.done = True
        self.inner.set_finished()

    def save_to_dir(self, dirpath: str, **kwargs: Any) -> None:
        """The generator's state (Tune's file), and beside it how many trials this one handed out."""
        session_str = str(kwargs.get("session_str", "default"))
        self.inner.save_to_dir(dirpath, session_str=session_str)
        with open(os.path.join(dirpath, f"{GATED_STATE}{session_str}.json"), "w") as f:
            json.dump({"handed": self.handed, "done": self.done}, f)

    def restore_from_dir(self, dirpath: str) -> None:
        self.inner.restore_from_dir(dirpath)
        saved = sorted(glob.glob(os.path.join(dirpath, f"{GATED_STATE}*.json")))
        if saved:  # a resumed extension hands out only what its limit left
            with open(saved[-1]) as f:
                state = json.load(f)
            self.handed, self.done = int(state.get("handed", 0)), bool(state.get("done", False))


def halting(search_alg: Any, halted: Callable[[], bool]) -> Any:
    """The search algorithm, finished for as long as ``halted()`` says (a stop was asked of Tune's loop).

    With no trial running, paused or pending, Tune's loop waits within one step for the search algorithm's next
    trial (asking once a second, for up to 600 s), and reads its interrupted event only between steps: a stop
    asked then (a paused sweep with nothing running, or the last running trial ending as the stop applies) would
    wait that long. That wait ends once the search algorithm says it is finished. It says so only while halted,
    and never records it (its saved state is not finished), so a resume goes on making trials. A model-based
    searcher gets Tune's own ``SearchGenerator`` (what Tune wraps it in anyway) with that one answer added.
    """
    from ray.tune.search import Searcher, SearchGenerator

    if is_gated(search_alg):
        search_alg.halted = halted
        return search_alg
    if not isinstance(search_alg, Searcher):
        return search_alg

    class HaltingGenerator(SearchGenerator):  # type: ignore[misc]
        def is_finished(self) -> bool:
            return bool(super().is_finished() or halted())

    return HaltingGenerator(search_alg)


def delegate(cls: type, names: tuple[str, ...]) -> None:
    """Give ``cls`` methods that call the same method of ``self.inner``."""

    def make(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(self.inner, name)(*args, **kwargs)

        call.__name__ = name
        return call

    for name in names:
        setattr(cls, name, make(name))


def is_gated(search_alg: Any) -> bool:
    return type(search_alg).__name__ == "GatedVariants"


def sweep_scheduler(inner: Any, starts: list[StartGate] | None = None,
                    stops: Callable[[str], bool] | None = None, name: str = "") -> Any:
    """``inner`` (any Tune scheduler) behind the sweep's start gates and trial stops; registered as the
    scheduler of the run ``name``'s session (again when a resume unpickles it)."""
    from ray.tune.schedulers import TrialScheduler

    class SweepScheduler(_Delegating, TrialScheduler):  # type: ignore[misc]
        """Delegates every decision to Ray's scheduler, except starting a trial while a gate says no, and
        letting a trial an operator stopped go on."""

        STOP = TrialScheduler.STOP
        PAUSE = TrialScheduler.PAUSE

    SweepScheduler.__name__ = SweepScheduler.__qualname__ = type(inner).__name__  # what Tune's box names
    return SweepScheduler(inner, starts, stops, name)


class _Delegating:
    """The body of :func:`sweep_scheduler`'s scheduler."""

    STOP: str
    PAUSE: str

    def __init__(self, inner: Any, starts: list[StartGate] | None, stops: Callable[[str], bool] | None,
                 name: str) -> None:
        self.inner, self.starts = inner, list(starts or [])
        self.stops, self.name = stops, name
        self.register()

    def register(self) -> None:
        from sweeps.execution.run import session

        if self.name:
            session.session(self.name).scheduler = self

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.register()  # a resumed run's session: its state callback finds this scheduler

    @property
    def metric(self) -> Any:
        return self.inner.metric

    @property
    def supports_buffered_results(self) -> bool:
        return bool(self.inner.supports_buffered_results)

    def set_search_properties(self, metric: Any, mode: Any, **spec: Any) -> bool:
        return bool(self.inner.set_search_properties(metric, mode, **spec))

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_add(tune_controller, trial)
        if self.name:
            startup.clock(self.name).ready(trial.trial_id)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision = self.inner.on_trial_result(tune_controller, trial, result)
        if self.stops is not None and self.stops(trial.trial_id):
            getattr(self.inner, "pop_events", list)()  # a pause that will not happen
            return str(self.STOP)
        if decision == self.PAUSE and not hasattr(self.inner, "pop_events"):
            self._tell([(trial.trial_id, "pause", float(result.get("training_iteration") or 0))])
        self._tell(getattr(self.inner, "pop_events", list)())
        return str(decision)

    def _tell(self, events: list[tuple[str, str, float]]) -> None:
        """Pauses, promotions and resumes onto the trials' MLflow runs (the sweep's tracker, when it has one)."""
        if not events or not self.name:
            return
        from sweeps.execution.run import session

        note = getattr(session.session(self.name).callbacks.get("given0"), "note_rung", None)
        if note is None:
            return
        for trial_id, kind, where in events:
            note(trial_id, kind, where)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        self.inner.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self.inner.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        if not all(gate(tune_controller) for gate in self.starts):
            return None
        chosen = self.inner.choose_trial_to_run(tune_controller)
        if chosen is not None and self.name:
            startup.clock(self.name).chosen(chosen.trial_id)
        if hasattr(self.inner, "pop_events"):  # its own promotions (and the pauses it decided)
            self._tell(self.inner.pop_events())
        elif self.name and chosen is not None and chosen.status == "PAUSED":  # HyperBand's next rung, PBT's restart
            last = getattr(chosen, "last_result", None) or {}
            self._tell([(chosen.trial_id, "resume", float(last.get("training_iteration") or 0))])
        return chosen

    def debug_string(self) -> str:
        return str(self.inner.debug_string())

    def save(self, checkpoint_path: str) -> None:
        self.inner.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.inner.restore(checkpoint_path)


def budget_gated(search_alg: Any, ledger: Any) -> Any:
    """The search algorithm, starting a trial only while the hours budget (``ledger``, a
    :class:`sweeps.execution.run.hours.Ledger`) admits one more (then it finishes)."""
    from ray.tune.search import ConcurrencyLimiter, Searcher
    from ray.tune.search.basic_variant import BasicVariantGenerator

    def budget(live: set[str]) -> str:
        if ledger.admits_next():
            return "go"
        return "wait" if live - ledger.ended else "done"  # nothing runs and nothing more fits: the sweep is done

    def waits(trial: Any) -> None:
        ledger.waiting += 1  # until Tune's next step counts the waiting trials again

    if not is_gated(search_alg) and isinstance(search_alg, BasicVariantGenerator):
        search_alg = gated_variants(search_alg, [])
    if is_gated(search_alg):
        search_alg.gates.append(budget)
        search_alg.started.append(waits)
        return search_alg

    class BudgetLimiter(ConcurrencyLimiter):  # type: ignore[misc]
        def suggest(self, trial_id: str) -> Any:
            if ledger.admits_next():
                ledger.waiting += 1  # until Tune's next step counts the waiting trials again
                return super().suggest(trial_id)
            return None if self.live_trials - ledger.ended else Searcher.FINISHED

    return BudgetLimiter(search_alg, max_concurrent=10**6)
