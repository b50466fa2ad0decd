"""Lever ``optuna_ga_lock``: Optuna's genetic samplers made picklable, as Tune pickles every searcher.

Optuna 5.1's NSGA-II and NSGA-III samplers keep a ``threading.Lock`` in their private ``_thread_lock``; Tune
pickles the searcher with the Tuner (``tuner.pkl``) and in its saved state, and a plain lock cannot be
pickled ("cannot pickle '_thread.lock' object"). The lever swaps it for a lock that pickles as a new one.
Fallback: the sampler travels inside a proxy that pickles as its constructor's arguments (a restored sampler
starts its random stream again; its population comes from the study, which Tune restores).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

from sweeps.execution.levers.core import Lever


class PicklableLock:
    """A ``threading.Lock`` that pickles as a new, unlocked one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return PicklableLock, ()


USES = re.compile(r"_thread_lock\b(\.\w+)?")


def check(samplers: Iterable[Any], source: str) -> str | None:
    """Each sampler keeps a plain lock in ``_thread_lock``, and Optuna's own code (``source``) uses it only as
    :class:`PicklableLock` can stand in for it (``with``, ``acquire``, ``release``)."""
    for sampler in samplers:
        if not isinstance(getattr(sampler, "_thread_lock", None), type(threading.Lock())):
            return f"{type(sampler).__name__} keeps no _thread_lock"
    calls = {m.group(1)[1:] for m in USES.finditer(source) if m.group(1)}
    missing = sorted(c for c in calls if not hasattr(PicklableLock, c))
    return f"Optuna calls {', '.join(missing)} on its sampler lock" if missing else None


def _probe() -> str | None:
    import inspect
    import warnings

    from optuna.samplers import NSGAIIISampler, NSGAIISampler

    base = next((c for c in NSGAIISampler.__mro__[:-1] if "_thread_lock" in inspect.getsource(c)), None)
    if base is None:
        return "no class of NSGAIISampler's sets _thread_lock"
    with warnings.catch_warnings():  # NSGA-III is experimental in Optuna: a warning per instance
        warnings.simplefilter("ignore")
        samplers = [NSGAIISampler(seed=0), NSGAIIISampler(seed=0)]
    return check(samplers, inspect.getsource(inspect.getmodule(base) or base))


LEVER = Lever(name="optuna_ga_lock", package="optuna", checked=("5.0.", "5.1."),
              what="Optuna's genetic samplers pickle with their state (their lock swapped for a picklable one)",
              fallback="the sampler pickles as its arguments (a restored one restarts its random stream)",
              probe=_probe)


def needs_it(sampler: Any) -> bool:
    return isinstance(getattr(sampler, "_thread_lock", None), type(threading.Lock()))


def make_picklable(sampler: Any) -> None:
    sampler._thread_lock = PicklableLock()
