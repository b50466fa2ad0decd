"""The slow tier's order: the longest test files first, from the durations the last recorded CI run printed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import DURATIONS, longest_first, recorded_seconds


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


# A slow test that runs this long either asserts on a sweep it shares with other tests (and names it) or says
# why it needs a sweep of its own: the house style's rule for slow tests, checked on the recorded durations.
LONG_S = 60.0
SAYS_WHY = re.compile(r"why\s+(?:its|their)\s+own|\bshares?\b", re.I)


def unexplained(durations: Path, tests_dir: Path = Path(__file__).parent) -> list[str]:
    """Tests of ``durations`` over ``LONG_S`` whose docstring neither names the sweep they share nor says why they
    need their own (tests no longer in ``tests_dir`` are skipped: the next recorded run drops them)."""
    out = []
    for test, seconds in recorded_seconds(durations).items():
        path, name = test.split("::")
        source = tests_dir / path
        if seconds < LONG_S or not source.is_file():
            continue
        fn = next((n for n in ast.walk(ast.parse(source.read_text()))
                   if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is not None and not SAYS_WHY.search(ast.get_docstring(fn) or ""):
            out.append(f"{test} ({seconds:.0f} s)")
    return out


def test_a_long_slow_test_names_the_sweep_it_shares_or_says_why_it_needs_its_own(tmp_path: Path) -> None:
    (tmp_path / "test_x_slow.py").write_text(
        'def test_long():\n    """Runs a sweep."""\n\n\n'
        'def test_said():\n    """Why its own sweep: it kills it."""\n\n\n'
        'def test_shared(s):\n    """Shares the module\'s sweep (fixture s)."""\n\n\ndef test_short():\n    pass\n')
    durations = tmp_path / "durations.txt"
    durations.write_text("".join(f"{s:.2f}s call     tests/test_x_slow.py::{name}\n" for name, s in
                                 [("test_long", 50), ("test_long", 20), ("test_said", 90), ("test_shared", 90),
                                  ("test_short", 30), ("test_gone", 300)]))
    assert unexplained(durations, tmp_path) == ["test_x_slow.py::test_long (70 s)"]
    assert unexplained(DURATIONS) == [], (
        "each of these ran over a minute in the last recorded CI run: say in its docstring which shared sweep it "
        "asserts on ('shares ...') or why it needs its own ('Why its own sweep: ...')")
