"""The driver's peak memory, per sweep: its mark reset when a sweep starts Ray, read for the sweep's record.

Linux keeps the mark itself (``VmHWM``, cleared through ``/proc/self/clear_refs``). Elsewhere (macOS, Windows)
the OS keeps only the process's lifetime peak, so the driver samples its resident memory instead: the lease
heartbeat calls :func:`sample` every beat, and :func:`peak_rss_mb` states the highest sample since the reset.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
MIB = 1024 * 1024

_lock = threading.Lock()
_sampled: float | None = None  # the highest RSS sampled since the last reset, MiB
_hwm_cleared = True  # whether VmHWM counts from the last reset (no reset yet: from the process's start, as do samples)


def reset_peak_rss() -> bool:
    """Start this process's peak-memory mark afresh: the samples, and on Linux ``VmHWM`` (``5`` to
    ``/proc/self/clear_refs`` resets it to the current RSS). False where the OS mark could not be reset (another
    OS, no permission): the sampled peak stands in for it."""
    global _sampled, _hwm_cleared
    with _lock:
        _sampled = None
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        cleared = True
    except OSError:
        cleared = False
    _hwm_cleared = cleared
    sample()
    return cleared


def _psutil() -> Any:
    import importlib

    try:
        return importlib.import_module("psutil")
    except ImportError:  # Ray ships psutil in its thirdparty_files, on sys.path once Ray is imported
        importlib.import_module("ray")
        return importlib.import_module("psutil")


def sample() -> float | None:
    """Read this process's resident memory now (MiB) and keep it if it is the highest since the reset; None
    where it cannot be read."""
    global _sampled
    try:
        rss = _psutil().Process().memory_info().rss / MIB
    except Exception as exc:  # no psutil, or the OS refused: the peak falls back to the OS's own figure
        log.debug("could not sample the driver's memory (%s)", exc)
        return None
    with _lock:
        _sampled = rss if _sampled is None else max(_sampled, rss)
    return rss


def _vmhwm() -> float | None:
    try:
        with open(STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb() -> float | None:
    """This process's peak resident memory in MiB since :func:`reset_peak_rss` (the sweep's own): Linux's
    ``VmHWM`` where the reset cleared it, else the highest :func:`sample` (taken once more now); None where
    neither can be read."""
    hwm = _vmhwm() if _hwm_cleared else None
    if hwm is not None:
        return hwm
    sample()
    return _sampled
