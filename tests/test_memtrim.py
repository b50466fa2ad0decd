"""The driver's heap trim (sweeps.execution.run.memtrim): freed heap goes back to the OS every N ended trials."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sweeps.execution.run import memtrim

# In a fresh interpreter: 300 MB in 3 KiB buffers (glibc's malloc, not Python's small-object arenas), all freed but
# every 200th (each page still in use somewhere up the heap, so free() alone cannot shrink it), then the trim.
FRAGMENTED = """
import json, sys
from sweeps.execution.run import memtrim

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

held = [bytearray(3072) for _ in range(100_000)]
for i in range(len(held)):
    held[i][0] = 1
kept = held[::200]
del held
freed = rss_kib()
trim = memtrim.trimmer() if sys.argv[1] == "trim" else None
gave = trim() if trim else None
print(json.dumps({"freed": freed, "after": rss_kib(), "gave": gave, "kept": len(kept)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or memtrim.trimmer() is None, reason="needs glibc")
def test_the_trim_gives_freed_heap_back_to_the_os() -> None:
    """Freed but fragmented heap stays resident until the trim; after it, most of it is gone (glibc)."""
    out = {}
    for mode in ("trim", "none"):
        proc = subprocess.run([sys.executable, "-c", FRAGMENTED, mode], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[mode] = json.loads(proc.stdout.splitlines()[-1])
    assert out["none"]["after"] > 200 * 1024, ("without the trim the freed heap stays resident", out)
    assert out["trim"]["gave"] == 1 and out["trim"]["after"] < out["trim"]["freed"] / 2, out


def test_the_callback_trims_every_n_ended_trials_and_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    cb = memtrim.trim_callback(every=100, trim=lambda: calls.append(1) or 1)
    for i in range(250):
        (cb.on_trial_complete if i % 5 else cb.on_trial_error)(0, [], None)
    assert len(calls) == 2, "after the 100th and the 200th ended trial, errors counted too"
    monkeypatch.setenv(memtrim.SWITCH, "0")
    assert memtrim.trimmer() is None and memtrim.trim_callback() is None
