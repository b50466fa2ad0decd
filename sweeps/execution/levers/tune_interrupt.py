"""Lever ``tune_interrupt``: a sweep's stop request ends Tune's loop the way Ctrl-C does, with no signal.

Tune's ``run`` leaves its loop, saves the experiment's state one last time and returns with the unfinished trials
left resumable when the ``threading.Event`` its ``_setup_signal_catching()`` made is set; its SIGINT handler is
what sets it, and only on the main thread. While a sweep's Tuner fits, this lever wraps that function: Tune's own
handlers are installed as before (Ctrl-C and SIGUSR1 work as documented), and the event it returns is handed to
the run (:class:`Interrupt`), which sets it on ``stop``, ``stop --now``, the stall watchdog and SIGTERM, from any
thread: a driver in a terminal, a notebook, a thread of another program or a Ray Job, and no host's signal
handler ever runs for it.

Fallback (public): the run's Tune ``Stopper`` says ``stop_all``; Tune ends every unfinished trial as stopped
(each keeps its checkpoints and results), so ``resume`` has nothing left to continue.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

from sweeps.execution.levers.core import Lever, first, source_says

MODULE = "ray.tune.tune"


def _probe() -> str | None:
    import importlib

    tune_module = importlib.import_module(MODULE)
    made = getattr(tune_module, "_setup_signal_catching", None)
    if made is None or inspect.signature(made).parameters:
        return f"{MODULE}._setup_signal_catching() is gone or takes parameters"
    found = first(source_says(MODULE, "experiment_interrupted_event = _setup_signal_catching()",
                              "not experiment_interrupted_event.is_set()",
                              "runner.checkpoint(force=True, wait=True)"))
    if found:
        return found
    box: list[Any] = []  # tried off the main thread, where it installs no handler: an Event comes back
    probe = threading.Thread(target=lambda: box.append(made()), name="sweeps-probe-tune-interrupt")
    probe.start()
    probe.join(timeout=10)
    if not box or not isinstance(box[0], threading.Event):
        return f"{MODULE}._setup_signal_catching() returned {box[0] if box else 'nothing'!r}, not an Event"
    return None


LEVER = Lever(name="tune_interrupt", package="ray", checked=("2.53.", "2.60."),
              what="stop requests end Tune's loop as Ctrl-C does (state saved, unfinished trials resumable), "
                   "from any thread, without a signal",
              fallback="a stop ends the running trials as stopped (checkpoints and results kept) through the "
                       "sweep's Stopper; `resume` has none left to continue",
              probe=_probe)


class Interrupt:
    """One run's stop switch: Tune's interrupted event once its loop made one, and whether a stop was asked.

    A stop asked while Tune's loop runs waits for the checkpoints in flight: a trial whose result Tune has taken
    (its callbacks have logged it) saves the checkpoint that came with it in a second round trip; ended in between,
    the resumed trial would train that epoch again, its result logged twice. So the event is set at the end of a
    step of Tune's loop with no trial saving (:meth:`step_ended`), or after ``settle_s`` whatever happens.
    """

    def __init__(self) -> None:
        self.event: threading.Event | None = None
        self.asked = False
        self.stepping = False  # Tune's loop has ended a step: the event is set at a step's end from then on
        self.timer: threading.Timer | None = None

    def set(self, settle_s: float = 0.0) -> None:
        self.asked = True
        if self.event is None or settle_s <= 0 or not self.stepping:
            self._fire()
        elif self.timer is None:
            self.timer = threading.Timer(settle_s, self._fire)
            self.timer.daemon = True
            self.timer.start()

    def _fire(self) -> None:
        if self.event is not None:
            self.event.set()

    def step_ended(self, trials: list[Any]) -> None:
        """At the end of each step of Tune's loop: a stop that waits sets the event once no trial is saving."""
        self.stepping = True
        if self.asked and not any(getattr(t, "is_saving", False) for t in trials):
            self._fire()

    def adopt(self, event: threading.Event) -> threading.Event:
        self.event = event
        if self.asked:  # asked before Tune's loop began
            event.set()
        return event


_current = threading.local()  # the Interrupt of the run fitting on this thread (Tuner.fit runs Tune's loop here)
_installed = threading.Lock()


def _wrap() -> None:
    import importlib

    tune_module = importlib.import_module(MODULE)
    with _installed:
        original = tune_module._setup_signal_catching
        if getattr(original, "__sweeps_wrapped__", False):
            return

        @functools.wraps(original)
        def setup_signal_catching() -> threading.Event:
            event = original()
            switch = getattr(_current, "interrupt", None)
            return switch.adopt(event) if switch is not None else event

        setup_signal_catching.__sweeps_wrapped__ = True  # type: ignore[attr-defined]
        tune_module._setup_signal_catching = setup_signal_catching  # type: ignore[attr-defined]


class fitting:
    """Context manager around ``Tuner.fit()`` on this thread: Tune's interrupted event goes to ``interrupt``."""

    def __init__(self, interrupt: Interrupt) -> None:
        self.interrupt = interrupt

    def __enter__(self) -> Interrupt:
        _wrap()
        self.before = getattr(_current, "interrupt", None)
        _current.interrupt = self.interrupt
        return self.interrupt

    def __exit__(self, *exc: object) -> None:
        _current.interrupt = self.before
