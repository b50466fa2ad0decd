"""The sweep's driver gives freed heap back to the OS as trials end (glibc's ``malloc_trim``).

A sweep of thousands of short trials frees most of what each trial's results, callbacks and MLflow writes
allocated, but glibc keeps freed pages inside its arenas, so the driver's resident memory keeps what it once
held. ``malloc_trim(0)`` every ``EVERY`` ended trials hands those pages back (a walk of the heap: milliseconds).
Over a 1,000-trial sweep of in-process trials it took the driver's growth from +143 to +82 KiB per finished
trial (benchmarks/RESULTS.md, "The driver's memory"). Linux with glibc only; elsewhere (musl, macOS, Windows)
nothing happens. ``SWEEPS_MALLOC_TRIM=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

SWITCH = "SWEEPS_MALLOC_TRIM"
EVERY = 100  # ended trials between two trims
log = logging.getLogger(__name__)


def trimmer() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of this process's C library (1: memory was given back), or None where there is none
    (not glibc) or the switch is off."""
    if os.environ.get(SWITCH, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl has no malloc_trim
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: int(fn(0))


def trim_callback(every: int = EVERY, trim: Callable[[], int] | None = None) -> Any:
    """A Tune callback that trims the driver's heap every ``every`` ended trials, or None where it cannot."""
    from ray.tune import Callback

    found = trim or trimmer()
    if found is None:
        return None
    trims: Callable[[], int] = found  # narrowed for the closure below

    class Trim(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.ended = 0

        def _ended(self) -> None:
            self.ended += 1
            if self.ended % every == 0:
                began = time.perf_counter()
                gave = trims()
                log.debug("malloc_trim after %d ended trials: %s in %.3f s", self.ended,
                          "memory given back" if gave else "nothing to give back", time.perf_counter() - began)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._ended()

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._ended()

    return Trim()
