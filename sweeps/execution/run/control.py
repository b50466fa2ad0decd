"""Operating a running sweep from anywhere: the driver's side of the sweep's live record (:mod:`sweeps.live`).

A Tune callback writes the sweep's status (counts, best, what the running trials hold, when it last made
progress, the driver and its lease) every :data:`EVERY_S` seconds and at the end, and polls the requests sent
to it. What a request does:

- ``pause``/``unpause``: no trial starts while paused (the scheduler's start gate), running ones go on; the
  stall watchdog does not count a pause as a stall;
- ``trial_stop``: the trial ends at its next report, as a scheduler's early stop (its checkpoint kept); its run
  in MLflow is tagged with who stopped it and when;
- ``stop``: no trial starts; once every running trial has saved a checkpoint again (or ended) the sweep
  stops as after SIGTERM (resumable); ``stop_now`` does that at once.

Each request is answered once; one for another run of the sweep (a stale one) is refused: every run draws its
own token (a random part of its own, so a resume in the same process, a notebook kernel's, is another run).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from sweeps import lease
from sweeps.execution.run import session

log = logging.getLogger(__name__)
EVERY_S = 2.0
SETTLE_S = 10.0  # a stop waits at most this long for the checkpoints in flight (their results already logged)
UNFINISHED = ("PENDING", "RUNNING", "PAUSED")


@dataclass
class Control:
    """What operators asked of this run of the sweep."""

    run: str  # this run's token: requests must name it
    paused: dict[str, Any] | None = None  # {by, since}
    stopping: dict[str, Any] | None = None  # {by, since, now, waiting: [trial ids yet to report]}
    trial_stops: dict[str, dict[str, Any]] = field(default_factory=dict)  # trial id -> {by, at, request}
    handled: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.time)
    idle_s: float = 0.0  # seconds paused with no trial running (what a time budget leaves out)
    idle_since: float | None = None

    def may_start(self, tune_controller: Any = None) -> bool:
        """The scheduler's start gate: no trial starts while paused or stopping."""
        return self.paused is None and self.stopping is None

    def note_idle(self, now: float, running: bool) -> None:
        """Called at each of Tune's steps (and each second while a pause holds Tune's loop): the time paused
        with nothing running adds up in ``idle_s``."""
        if self.idle_since is not None:
            self.idle_s += max(now - self.idle_since, 0.0)
        self.idle_since = now if self.paused is not None and not running else None

    def idle(self, now: float | None = None) -> float:
        """``idle_s``, the stretch still going included."""
        now = time.time() if now is None else now
        return self.idle_s + (max(now - self.idle_since, 0.0) if self.idle_since is not None else 0.0)

    def stops(self, trial_id: str) -> bool:
        return trial_id in self.trial_stops


def control_of(name: str) -> Control:
    """The run ``name``'s control state (made on first use)."""
    live = session.session(name)
    if live.control is None:
        live.control = Control(run=run_token(name))
    return live.control


def run_token(name: str) -> str:
    """A token for one run of the sweep: the process's and a random part of the run's own."""
    return f"{name}@{lease.me().token[:12]}-{secrets.token_hex(4)}"


def idle_of(name: str) -> Any:
    """``idle()`` of the run ``name``'s control state, for its time budget's clock."""
    return lambda: control_of(name).idle()


def start_gate(name: str) -> Any:
    """A picklable start gate for the run ``name`` (looked up in its session, also after a resume)."""
    return _Gate(name)


class _Gate:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, tune_controller: Any) -> bool:
        return control_of(self.name).may_start(tune_controller)


class _Stops:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, trial_id: str) -> bool:
        return control_of(self.name).stops(trial_id)


def trial_stops(name: str) -> Any:
    return _Stops(name)


class _Holding:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self) -> bool:
        held = not control_of(self.name).may_start()
        if held:
            # With nothing running, Tune's loop blocks asking the search algorithm for a trial once a second,
            # and no callback runs: the live record is kept (and an unpause read) from here then.
            live_record = session.session(self.name).callbacks.get("live")
            if live_record is not None and hasattr(live_record, "tick"):
                live_record.tick()
            held = not control_of(self.name).may_start()
        return held


class _Halted:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self) -> bool:
        live = session.session(self.name)
        if not (live.interrupt.asked or live.stop_all):
            return False
        trials = getattr(live.callbacks.get("live"), "trials", None) or []
        if any(t.status in UNFINISHED for t in trials):
            return False
        live.halted = True  # asked only while the search has trials to make: the run ends unfinished
        return True


def halted(name: str) -> Any:
    """A picklable ``halted()`` for the run ``name``'s search algorithm: True once a stop was asked of Tune's loop
    (:func:`request_stop`, SIGTERM's way in too) and no trial of the run is unfinished, so that the loop ends even
    while it waits for a trial to make (:func:`.wrappers.halting`). While a trial is unfinished Tune's loop does not
    wait there, and the search goes on as not finished: a scheduler that acts once the search is done (promotion
    ASHA stops its unpromoted trials then) decides as if no stop had come. A run whose search was halted ends
    interrupted (resumable) though none of its trials is unfinished: the search had more to make."""
    return _Halted(name)


def holding(name: str) -> Any:
    """A picklable ``hold()`` for the run ``name``'s search algorithm: True while no trial may start."""
    return _Holding(name)


def apply(control: Control, request: dict[str, Any], trials: list[Any]) -> tuple[str, str]:
    """Apply one request: (answer state, why)."""
    verb, who = request.get("verb"), request.get("sender") or {}
    by = f"{who.get('user', '?')}@{who.get('host', '?')}"
    if request.get("run") != control.run:
        return "refused", f"stale: the request names run {request.get('run')!r}, this driver runs {control.run!r}"
    if control.stopping and verb != "stop_now":
        return "refused", f"a stop is pending since {time.ctime(control.stopping['since'])} ({control.stopping['by']})"
    if verb == "pause":
        if control.paused:
            return "refused", f"already paused by {control.paused['by']} since {time.ctime(control.paused['since'])}"
        control.paused = {"by": by, "since": time.time()}
        return "applied", "no trial starts until unpause; running trials go on"
    if verb == "unpause":
        if not control.paused:
            return "refused", "the sweep is not paused"
        control.paused = None
        return "applied", "trials start again"
    if verb == "trial_stop":
        tid = request.get("trial_id")
        running = [t.trial_id for t in trials if t.status in UNFINISHED]
        if tid not in running:
            return "refused", f"no unfinished trial {tid!r}; unfinished: {', '.join(running) or 'none'}"
        control.trial_stops[str(tid)] = {"by": by, "at": time.time(), "request": request.get("id")}
        return "accepted", f"trial {tid} ends at its next report, as an early stop"
    if verb in ("stop", "stop_now"):
        waiting = _stopping(control, by, verb == "stop_now", trials, request.get("id"))
        return "accepted", ("stopping now: running trials are killed" if verb == "stop_now" else
                            f"no trial starts; the sweep stops once its {len(waiting)} running trial(s) saved a "
                            f"checkpoint again")
    return "refused", f"unknown verb {verb!r}"


def interrupt(name: str) -> bool:
    """End the run ``name``'s Tune loop as Ctrl-C does (its state saved, unfinished trials resumable), from any
    thread and without a signal, once the checkpoints in flight are saved (at most :data:`SETTLE_S`): True where
    the ``tune_interrupt`` lever applies, else False (nothing done)."""
    from sweeps.execution.levers import core, tune_interrupt

    if not core.applies(tune_interrupt.LEVER):
        return False
    session.session(name).interrupt.set(SETTLE_S)  # once no checkpoint is in flight (Interrupt.step_ended)
    return True


def request_stop(name: str, why: str) -> None:
    """Stop the run ``name`` now: :func:`interrupt`, or where that lever is off, Tune's public path (the
    sweep's Stopper says ``stop_all``: every unfinished trial ends as stopped, its checkpoints kept)."""
    if interrupt(name):
        log.info("stopping the sweep (%s): Tune saves its state, `python -m sweeps resume` continues it", why)
        return
    session.session(name).stop_all = True
    log.warning("stopping the sweep (%s) through its Stopper: on this Ray (lever tune_interrupt off) its unfinished "
                "trials end as stopped, with their checkpoints; `resume` has none left to continue", why)


def stop_after_checkpoints(name: str, why: str) -> None:
    """As ``sweeps stop`` does, asked from this process (an API call): no trial starts, and once every running
    trial saved a checkpoint again (or ended) the run stops (:func:`request_stop`)."""
    c = control_of(name)
    if not c.stopping:
        _stopping(c, why, False, getattr(session.session(name).callbacks.get("live"), "trials", []), None)


def _stopping(c: Control, by: str, now: bool, trials: list[Any], request: str | None) -> list[str]:
    """Set the run's pending stop (it waits for the trials running now); the trials it waits for."""
    waiting = [t.trial_id for t in trials if t.status == "RUNNING"]
    c.stopping = {"by": by, "since": time.time(), "now": now, "waiting": waiting, "request": request}
    return waiting


def fitting(name: str) -> Any:
    """Around the run ``name``'s ``Tuner.fit()``: Tune's interrupted event goes to the run (where the lever
    applies)."""
    import contextlib

    from sweeps.execution.levers import core, tune_interrupt

    if not core.applies(tune_interrupt.LEVER):
        return contextlib.nullcontext()
    return tune_interrupt.fitting(session.session(name).interrupt)
