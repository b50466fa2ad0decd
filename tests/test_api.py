"""The Python API's surface (fast): names and laziness, validation that raises with every problem, a stored sweep
read back as a DataFrame, the host's signal handlers left alone, the status line updated in place.

The real thing, a sweep run from a real Jupyter kernel, is tests/test_notebook_slow.py.
"""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import sweeps
from sweeps import store
from sweeps.api import live
from sweeps.api.result import SweepResult
from sweeps.ops.signals import TUNE_SIGINT_OFF, Signals, hosted

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("ray", "torch", "mlflow", "pandas", "hydra", "omegaconf", "IPython", "sklearn")


def test_import_sweeps_is_instant_and_the_api_is_lazy() -> None:
    code = ("import sys, sweeps; heavy = " + repr(HEAVY) + "\n"
            "loaded = lambda: sorted({m.split('.')[0] for m in sys.modules} & set(heavy))\n"
            "print(loaded(), 'sweeps.api' in sys.modules)\n"
            "sweeps.run, sweeps.SweepResult\n"
            "print(loaded(), 'sweeps.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[] False", "import sweeps loaded the API or a heavy library"
    assert out[1] == "[] True", "the API's own import loaded a heavy library"


def test_the_public_surface_is_typed_and_documented() -> None:
    assert (REPO / "sweeps" / "py.typed").is_file()
    assert set(dir(sweeps)) == set(sweeps.__all__)
    for name in sweeps.__all__:
        if name == "__version__":
            continue
        obj = getattr(sweeps, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"sweeps.{name} has no docstring"
    assert issubclass(sweeps.BadInput, ValueError) and issubclass(sweeps.SweepInterrupted, KeyboardInterrupt)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sweeps.nope  # noqa: B018


def test_bad_config_raises_one_error_listing_every_problem_and_starts_nothing(sweeps_env: Any) -> None:
    with pytest.raises(ValueError) as caught:
        sweeps.run("quickstart", overrides=["sweep.num_samples=0", "sweep.mode=up", "trainable.num_workers=-1"])
    err = caught.value
    assert isinstance(err, sweeps.BadInput) and err.exit_code == 2
    assert len(err.problems) == 3 and str(err).startswith("3 problems:")
    for key in ("sweep.num_samples", "sweep.mode: 'up'", "trainable.num_workers"):
        assert any(p.startswith(key) for p in err.problems), (key, err.problems)
        assert key in str(err)
    assert not sweeps_env.home.exists(), "rejected input must not touch MLflow, storage or the index"
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_bad_arguments_are_named_before_anything_is_composed(sweeps_env: Any) -> None:
    with pytest.raises(sweeps.BadInput) as caught:
        sweeps.run("+experiment=quickstart", overrides="sweep.num_samples=4")  # type: ignore[arg-type]
    assert [p.split(":")[0] for p in caught.value.problems] == ["experiment", "overrides"]
    assert "e.g. ['sweep.num_samples=4']" in str(caught.value)
    with pytest.raises(sweeps.BadInput, match="unknown option 'nope'; available experiment options: .*quickstart"):
        sweeps.run("nope")
    with pytest.raises(sweeps.BadInput, match="more_trials: must be a whole number >= 1, got 0"):
        sweeps.extend("latest", 0)
    with pytest.raises(sweeps.BadInput, match="no sweeps yet"):
        sweeps.load("latest")


def _stored(sweep_id: str, **kw: Any) -> store.SweepRecord:
    from test_report import sweep_record

    return sweep_record(sweep_id, mlflow_experiment_id="7", parent_run_id="abc123", tracking_uri="sqlite:///x.db",
                        **kw)


def test_load_reads_a_stored_sweep_as_trials_csv(sweeps_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_report import collected, sweep_trials

    from sweeps.reports import load as load_mod
    from sweeps.reports.formats import csv_text

    monkeypatch.setattr(load_mod, "load_sweep", lambda rec: (sweep_trials(), collected()))  # no Ray results here
    store.save(_stored("demo-1", report_dir="/r/demo-1"))
    result = sweeps.load("latest")
    assert isinstance(result, SweepResult) and (result.sweep_id, result.status, result.exit_code) == ("demo-1",
                                                                                                   "finished", 0)
    frame = result.trials
    assert list(frame.columns) == csv_text(collected()).splitlines()[0].split(",")
    assert list(frame["trial_id"]) == ["t_best", "t_mid", "t_nan", "t_slow", "t_failed"]  # ranked, best first
    assert frame["best/val/loss"].iloc[0] == 0.3 and frame["rank"].iloc[0] == 1
    assert math.isnan(frame.set_index("trial_id").loc["t_nan", "final/val/loss"]), "NaN is a float, not text"
    best = result.best
    assert best is not None and (best.trial_id, best.metric, best.mode, best.value) == ("t_best", "val/loss", "min",
                                                                                        0.3)
    assert best.params == {"lr": 0.01, "width": 32}
    assert result.report_path == Path("/r/demo-1/report.html")
    assert result.parent_run_id == "abc123"
    assert result.mlflow_url == "http://127.0.0.1:5000/#/experiments/7/runs/abc123"
    assert "status='finished'" in repr(result) and "val/loss=0.3 (t_best)" in repr(result)


@pytest.mark.parametrize(("status", "stop", "shown", "code"), [
    ("interrupted", None, "interrupted", 130), ("interrupted", "stalled", "stalled", 1),
    ("failed", None, "failed", 1), ("running", None, "running", None)])
def test_a_stored_sweep_says_how_it_ended(status: str, stop: str | None, shown: str, code: int | None,
                                          sweeps_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_report import collected, sweep_trials

    from sweeps.reports import load as load_mod

    monkeypatch.setattr(load_mod, "load_sweep", lambda rec: (sweep_trials(), collected()))
    store.save(_stored("demo-2", status=status, stop_reason=stop))
    result = sweeps.load("demo-2")
    assert (result.status, result.exit_code) == (shown, code)


def _custom(*_: object) -> None:
    """A host's own handler."""


def test_a_hosted_sweep_leaves_the_hosts_signal_handlers_alone() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    signal.signal(signal.SIGTERM, _custom)
    try:
        with hosted(), Signals() as s:
            assert signal.getsignal(signal.SIGTERM) is _custom and not s.took, "the host's SIGTERM was replaced"
            signal.signal(signal.SIGINT, _custom)  # what Tune does in the main thread, and leaves behind
            signal.signal(signal.SIGUSR1, _custom)
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT], "Tune's SIGINT handler stayed"
        assert signal.getsignal(signal.SIGUSR1) is before[signal.SIGUSR1]
        with Signals() as s:  # the CLI owns its process: SIGTERM becomes the graceful stop
            assert s.took and signal.getsignal(signal.SIGTERM) == s._term
        assert signal.getsignal(signal.SIGTERM) is _custom
    finally:
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])


def test_tune_takes_ctrl_c_only_where_sigint_has_pythons_default_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TUNE_SIGINT_OFF, raising=False)
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Jupyter kernel while a cell runs; a script
    try:
        with hosted():
            assert TUNE_SIGINT_OFF not in os.environ, "Tune's graceful Ctrl-C is what stops a notebook's sweep"
        signal.signal(signal.SIGINT, _custom)  # a host with its own Ctrl-C handling keeps it during the fit
        with hosted():
            assert os.environ.get(TUNE_SIGINT_OFF) == "1"
        assert TUNE_SIGINT_OFF not in os.environ
    finally:
        signal.signal(signal.SIGINT, before)


def test_signals_outside_the_main_thread_set_no_handler() -> None:
    failures: list[BaseException] = []

    def body() -> None:
        try:
            with hosted(), Signals() as s:
                assert not s.took
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            failures.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert not failures, failures


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _say(*lines: str) -> None:
    for line in lines:
        logging.getLogger(live.PROGRESS_LOGGER).info("%s", line)


def test_the_status_line_is_rewritten_in_place_on_a_terminal() -> None:
    tty = _Tty()
    with live.status_line(stream=tty):
        _say("trials: 1 running", "trials: 2 running", "trials: 2 done")
    text = tty.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1 and text.endswith("[sweeps] trials: 2 done\x1b[K\n")


def test_without_a_terminal_or_a_logging_setup_the_status_lines_go_to_stderr(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a plain script: nobody configured logging
    monkeypatch.setattr(logging.getLogger("sweeps"), "handlers", [])
    monkeypatch.setattr(logging.getLogger("sweeps"), "propagate", True)  # as a host that never ran the CLI has it
    logger = logging.getLogger(live.PROGRESS_LOGGER)
    level, propagate = logger.level, logger.propagate
    plain = io.StringIO()
    with live.status_line(stream=plain):
        _say("trials: 1 running", "trials: 2 done")
    assert plain.getvalue() == "[sweeps] trials: 1 running\n[sweeps] trials: 2 done\n"
    assert (logger.level, logger.propagate, logger.handlers) == (level, propagate, []), "the logger is as it was"
    handler = logging.StreamHandler(io.StringIO())
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])  # the host configured logging: its call
    assert live.line_handler(io.StringIO()) is None
