"""The slow tier's order: the longest test files first, from the durations the last recorded CI run printed."""

from __future__ import annotations

from pathlib import Path

from conftest import DURATIONS, longest_first


def test_files_run_longest_first_by_their_summed_recorded_time(tmp_path: Path) -> None:
    durations = tmp_path / "durations.txt"
    durations.write_text("# a CI run\n"
                         "90.00s call     tests/test_a_slow.py::test_one\n"
                         "60.00s call     tests/test_b_slow.py::test_one\n"
                         "45.00s setup    tests/test_b_slow.py::test_two\n"
                         "1.00s teardown tests/test_c.py::test_x[param-1]\n")
    assert longest_first(durations) == ("test_b_slow.py", "test_a_slow.py", "test_c.py")
    assert longest_first(tmp_path / "missing.txt") == ()


def test_the_recorded_durations_name_the_slow_tier_s_files() -> None:
    assert "test_resume_decisions_slow.py" in longest_first(DURATIONS)
