"""Lever ``optuna_ga_lock``: Optuna's genetic samplers made picklable, as Tune pickles every searcher.

Optuna 5.1's NSGA-II and NSGA-III samplers keep a ``threading.Lock`` in their private ``_thread_lock``; Tune
pickles the searcher with the Tuner (``tuner.pkl``) and in its saved state, and a plain lock cannot be
pickled ("cannot pickle '_thread.lock' object"). The lever swaps it for a lock that pickles as a new one.
Fallback: the sampler travels inside a proxy that pickles as its constructor's arguments (a restored sampler
starts its random stream again; its population comes from the study, which Tune restores).
"""

from __future__ import annotations

import threading
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


def _probe() -> str | None:
    from optuna.samplers import NSGAIISampler

    sampler = NSGAIISampler(seed=0)
    if not isinstance(getattr(sampler, "_thread_lock", None), type(threading.Lock())):
        return "NSGAIISampler keeps no _thread_lock"
    return None


LEVER = Lever(name="optuna_ga_lock", package="optuna", checked=("5.0.", "5.1."),
              what="Optuna's genetic samplers pickle with their state (their lock swapped for a picklable one)",
              fallback="the sampler pickles as its arguments (a restored one restarts its random stream)",
              probe=_probe)


def needs_it(sampler: Any) -> bool:
    return isinstance(getattr(sampler, "_thread_lock", None), type(threading.Lock()))


def make_picklable(sampler: Any) -> None:
    sampler._thread_lock = PicklableLock()
