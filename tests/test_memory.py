"""The driver's peak memory in the sweep's record: the sweep's own, on Linux (``VmHWM``) and where ``/proc`` has
none (the lease heartbeat's samples). Each test reads the function the record is written with
(``sweeps.ops.run`` calls ``memory.peak_rss_mb``). Fast tier: 200 MiB of ballast, real reads of this process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sweeps import lease
from sweeps.execution.cluster import memory
from sweeps.ops import run as ops_run
from sweeps.ops.heartbeat import Heartbeat

BALLAST_MIB = 200


def _ballast() -> bytearray:
    ballast = bytearray(BALLAST_MIB * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page: resident, not only reserved
    return ballast


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / memory.MIB


@pytest.fixture
def no_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as on macOS or Windows: no ``/proc/self/status`` to read, no mark to clear."""
    monkeypatch.setattr(memory, "STATUS", str(tmp_path / "no-proc" / "status"))
    monkeypatch.setattr(memory, "CLEAR_REFS", str(tmp_path / "no-proc" / "clear_refs"))
    yield
    memory.reset_peak_rss()  # the samples of this test are not the next one's


def test_the_record_reads_the_one_peak_memory_function() -> None:
    assert ops_run.memory.peak_rss_mb is memory.peak_rss_mb
    assert not hasattr(ops_run, "peak_rss_mb"), "a second copy of the peak-memory figure in ops/run.py"


def test_the_peak_memory_mark_starts_afresh_for_each_sweep() -> None:
    if not memory.reset_peak_rss():
        pytest.skip("no /proc/self/clear_refs here")
    ballast = _ballast()
    high = ops_run.memory.peak_rss_mb() or 0.0
    del ballast
    assert memory.reset_peak_rss()
    assert (ops_run.memory.peak_rss_mb() or 0.0) < high - 150, "the mark forgot the earlier sweep's peak"


def test_without_proc_the_peak_is_the_highest_sample_since_the_reset(no_proc: None) -> None:
    assert not memory.reset_peak_rss(), "no mark to clear"
    ballast = _ballast()
    memory.sample()
    held = _rss_mib()
    del ballast
    high = ops_run.memory.peak_rss_mb() or 0.0
    assert high >= held - 5, f"the sample taken with the ballast held ({held:.0f} MiB) is the peak, got {high:.0f}"
    memory.reset_peak_rss()  # the next sweep in this process (a notebook kernel)
    later = ops_run.memory.peak_rss_mb() or 0.0
    assert 0 < later < high - 150, f"the earlier sweep's peak ({high:.0f} MiB) is not this one's ({later:.0f})"


def test_without_proc_the_lease_heartbeat_samples_the_sweeps_peak(
    no_proc: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(lease, "LEASE_S", 0.2)  # a beat every 0.05 s
    memory.reset_peak_rss()
    with Heartbeat("no-such-sweep"):  # its lease write fails (no record): the sampling does not depend on it
        ballast = _ballast()
        held = _rss_mib()
        time.sleep(0.5)  # several beats with the ballast held
        del ballast
        time.sleep(0.2)
    peak = ops_run.memory.peak_rss_mb() or 0.0
    assert peak >= held - 5, (
        f"the heartbeat's samples missed the {BALLAST_MIB} MiB held mid-sweep: peak {peak:.0f} MiB, {held:.0f} MiB held"
    )
