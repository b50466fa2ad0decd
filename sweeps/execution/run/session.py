"""One sweep's live state in this process, by sweep id: what its Tune objects share, and what the run reads back.

Tune pickles a sweep's search algorithm, scheduler, stopper and callbacks into its experiment folder
(``tuner.pkl``, the searcher's state) and unpickles them on ``sweeps resume``. Whatever those objects must
share with the driver that runs them now (the hours ledger, the census of paused trials, the metric check's
verdict, the stall watchdog, the callbacks themselves) is looked up here by sweep id when they are unpickled,
never carried inside the pickle: a restored sweep finds the state of the run that resumes it, and two sweeps
in one notebook kernel never see each other's. :class:`Outcome` is what the execution layer hands back.

Callbacks go into Tune's ``RunConfig`` as :func:`handles`: each names a role of the sweep; a handle unpickled
by a resume delegates to the callback that the resuming run registered for that role (a role it has not
registered is a no-op), so a restored Tuner needs no private setter for its callbacks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeps.execution.levers.tune_interrupt import Interrupt
from sweeps.execution.run import hours
from sweeps.execution.run.hours import Ledger

if TYPE_CHECKING:
    from sweeps.execution.run.budget import Clock
    from sweeps.execution.run.control import Control
    from sweeps.execution.run.startup import Clock as StartupClock


class Census:
    """Which trials Tune has paused right now; fed by a callback, read by the elastic limiters (remote)."""

    def __init__(self, sweep_id: str = "") -> None:
        self.sweep_id = sweep_id
        self.paused: set[str] = set()

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return census_of, (self.sweep_id,)


@dataclass
class Session:
    """What one sweep's Tune objects share in this process."""

    sweep_id: str  # the key: the Tune run's name (the sweep id, or its extension's or confirmation's name)
    sweep: str = ""  # the sweep this run belongs to
    census: Census = field(default_factory=Census)
    metric_problem: str | None = None  # why the metric check ended the sweep (sweeps.execution.run.firstreport)
    watch: Any = None  # the stall watchdog's Watch (sweeps.execution.run.stall)
    callbacks: dict[str, Any] = field(default_factory=dict)  # role -> the live Tune callback
    control: Control | None = None  # what operators asked of this run (sweeps.execution.run.control)
    clock: Clock | None = None  # what the sweep's time budget counts (sweeps.execution.run.budget)
    startup: StartupClock | None = None  # the trials' start-up clock (sweeps.execution.run.startup)
    scheduler: Any = None  # the sweep's scheduler wrapper, once Tune set it up (sweeps.execution.run.wrappers)
    planned: int | None = None  # the trials an extension plans, its earlier ones included (the status line)
    earlier_trials: list[Any] = field(default_factory=list)  # ended trials of the sweep's earlier experiments
    resumed: bool = False  # a resume: the scheduler's saved state comes back
    scheduler_lost: str | None = None  # why a resume has no scheduler state to restore
    scheduler_from: Any = None  # an extension: the scheduler state the sweep's last run saved
    interrupt: Interrupt = field(default_factory=Interrupt)  # ends Tune's loop as Ctrl-C does (stop requests)
    stop_all: bool = False  # a stop where the tune_interrupt lever is off: the Stopper ends every trial
    halted: bool = False  # a stop ended the search with trials still to make (control.halted): the run is unfinished

    def __post_init__(self) -> None:
        self.census.sweep_id = self.sweep_id

    @property
    def ledger(self) -> Ledger:
        return hours.ledger_of(self.sweep_id)

    @property
    def stalled(self) -> str | None:
        return getattr(self.watch, "stalled", None)


@dataclass(frozen=True)
class Outcome:
    """How a sweep's Tune run ended, as the execution layer saw it (read after ``Tuner.fit``)."""

    stalled: str | None
    metric_missing: str | None
    hours: dict[str, float | None]
    stopped_by: str | None = None  # an operator's `sweeps stop` (who), not a signal
    running_s: float | None = None  # what the sweep's time budget counted, its earlier runs included
    halted: bool = False  # a stop ended the search with trials still to make: interrupted, though none is unfinished


_sessions: dict[str, Session] = {}
_lock = threading.Lock()


def session(sweep_id: str) -> Session:
    """The sweep's session in this process (made on first use)."""
    with _lock:
        if sweep_id not in _sessions:
            _sessions[sweep_id] = Session(sweep_id)
        return _sessions[sweep_id]


def start(sweep_id: str) -> Session:
    """A fresh session for a run of the sweep (a new run, a resume, an extension): nothing of an earlier run
    in this process carries over."""
    with _lock:
        hours.forget(sweep_id)
        _sessions[sweep_id] = Session(sweep_id)
        return _sessions[sweep_id]


def outcome(sweep_id: str) -> Outcome:
    s = session(sweep_id)
    stopping = (s.control.stopping if s.control is not None else None) or {}
    clock = s.clock
    return Outcome(stalled=s.stalled, metric_missing=s.metric_problem, hours=s.ledger.record(),
                   stopped_by=stopping.get("by"), running_s=clock.used() if clock is not None else None,
                   halted=s.halted)


def end(sweep_id: str) -> None:
    """Forget the sweep's session (its run is over and its outcome read)."""
    with _lock:
        _sessions.pop(sweep_id, None)
        hours.forget(sweep_id)


def earlier(sweep_id: str) -> list[Any]:
    """The trials of the sweep's earlier experiments that ended (an extension's, or an interrupted extension's
    on resume): the status line and the live status count and rank them with this run's."""
    found = session(sweep_id).earlier_trials
    return [t for t in found if t.status in ("TERMINATED", "ERROR")]


def census_of(sweep_id: str) -> Census:
    return session(sweep_id).census


CALLBACK_METHODS = ("setup", "on_step_begin", "on_step_end", "on_trial_start", "on_trial_restore", "on_trial_save",
                    "on_trial_result", "on_trial_complete", "on_trial_recover", "on_trial_error", "on_checkpoint",
                    "on_experiment_end", "get_state", "set_state")


def handles(sweep_id: str, roles: list[str]) -> list[Any]:
    """One Tune callback per role, each delegating to the callback registered for it in the sweep's session."""
    from ray.tune import Callback

    class Handle(Callback):  # type: ignore[misc]
        """Delegates Tune's callback calls to ``session(sweep_id).callbacks[role]`` (pickles as its names)."""

        def __init__(self, role: str) -> None:
            self.sweep_id, self.role = sweep_id, role

        def _target(self) -> Any:
            return session(self.sweep_id).callbacks.get(self.role)

        def __repr__(self) -> str:
            return f"Handle({self.sweep_id!r}, {self.role!r})"

    def delegate(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = self._target()
            if target is None:
                return None
            return getattr(target, name)(*args, **kwargs)

        call.__name__ = name
        return call

    for name in CALLBACK_METHODS:
        setattr(Handle, name, delegate(name))
    return [Handle(role) for role in roles]
