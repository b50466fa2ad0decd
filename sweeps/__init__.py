"""sweeps: hyperparameter sweeps on Ray Tune + Ray Train, tracked in MLflow, composed with Hydra.

From Python (a notebook, a script, a CI job)::

    import sweeps
    result = sweeps.run("quickstart", overrides=["sweep.num_samples=4"])
    result.trials                  # pandas DataFrame, like the report's trials.csv
    sweeps.load("latest").best     # a stored sweep
    sweeps.promote(result.sweep_id, model_name="digits-mlp")

``import sweeps`` stays instant: the API (:mod:`sweeps.api`) loads on first use of one of its names, and Ray,
MLflow, torch and pandas only when a sweep needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweeps.errors import BadInput, GateRefused, SweepsError

if TYPE_CHECKING:  # what __getattr__ hands out, for type checkers and editors
    from sweeps.api import (
        BestTrial,
        Confirmation,
        SweepInterrupted,
        SweepResult,
        confirm,
        extend,
        load,
        pause,
        promote,
        resume,
        run,
        status,
        stop,
        stop_trial,
        unpause,
    )

__version__ = "0.1.0"
__all__ = ["BadInput", "BestTrial", "Confirmation", "GateRefused", "SweepInterrupted", "SweepResult", "SweepsError",
           "__version__", "confirm", "extend", "load", "pause", "promote", "report", "resume", "run", "status", "stop",
           "stop_trial", "unpause"]
_FROM_API = frozenset(__all__) - {"BadInput", "GateRefused", "SweepsError", "__version__", "report"}


def report(metrics: dict[str, Any]) -> None:
    """Inside a script swept as it is (``sweeps new trainable NAME --script PATH``): figures for the trial's
    report, once per epoch, e.g. ``sweeps.report({"val_loss": val_loss})``. Outside a sweep it does nothing,
    so the script still runs alone unchanged. Call it on every rank or on rank 0 only: rank 0's figures count."""
    import sys

    # the adapter's reporter lives in the Train worker that runs the script, where the adapter's module is loaded;
    # anywhere else the module is absent and there is nothing to report to (no import: sweeps never loads it)
    session = sys.modules.get("trainables.script.session")
    reporter = session.current() if session is not None else None
    if reporter is not None:
        reporter.log(metrics)


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use (PEP 562)."""
    if name not in _FROM_API:
        raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module("sweeps.api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)  # what a notebook's tab completion offers
