"""The driver's peak memory, per sweep: its mark reset when a sweep starts Ray, read for the sweep's record."""

from __future__ import annotations

import sys

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"


def reset_peak_rss() -> bool:
    """Start this process's peak-memory mark afresh (Linux: ``5`` to ``/proc/self/clear_refs`` resets
    ``VmHWM`` to the current RSS); False where it cannot (another OS, no permission): the peak is then the
    process's own, since it began."""
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float | None:
    """This process's peak resident memory in MiB since :func:`reset_peak_rss` (``VmHWM``); where ``/proc`` has
    none, its peak since it began (``getrusage``: KiB on Linux, bytes on macOS), or None."""
    try:
        with open(STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)
