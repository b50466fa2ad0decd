"""The Python API: run, resume, load, confirm and promote sweeps from a notebook, a script or a CI job.

The same pipeline and validation as ``python -m sweeps``, without its process-level habits: bad input raises
:class:`~sweeps.errors.BadInput` (a ``ValueError`` listing every problem) instead of exiting, the host's signal
handlers are left alone, Ctrl-C (a kernel interrupt) stops the sweep cleanly and then raises
:class:`SweepInterrupted` (a ``KeyboardInterrupt``), and the status line updates in place::

    import sweeps
    result = sweeps.run("quickstart", overrides=["sweep.num_samples=4"])
    result.trials        # a pandas DataFrame, the report's trials.csv
    result.best          # BestTrial(trial_id=..., metric='val/acc', value=0.97, params={...})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sweeps.api import calls
from sweeps.api.result import BestTrial, Confirmation, SweepInterrupted, SweepResult
from sweeps.errors import BadInput

if TYPE_CHECKING:
    from sweeps.registry.promote import Promotion

__all__ = ["BestTrial", "Confirmation", "SweepInterrupted", "SweepResult", "confirm", "extend", "load", "pause",
           "promote", "resume", "run", "status", "stop", "stop_trial", "unpause"]


def _checked_overrides(overrides: Sequence[str], problems: list[str]) -> list[str]:
    if isinstance(overrides, str):
        problems.append(f"overrides: give a list of 'key=value' strings, e.g. [{overrides!r}]; got the string "
                        f"{overrides!r}")
        return []
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        problems.append(f"overrides: each must be a 'key=value' string; got {', '.join(map(repr, bad))}")
    return [o for o in overrides if isinstance(o, str)]


def _returned(result: SweepResult) -> SweepResult:
    """The result; an interrupt (Ctrl-C, SIGTERM) raises, a stop an operator asked for (`sweeps stop`) returns."""
    if result.status == "interrupted" and result.record.stop_reason != "stopped":
        raise SweepInterrupted(result)
    return result


def run(experiment: str | None, overrides: Sequence[str] = (), *, progress: bool = True) -> SweepResult:
    """Run a sweep: ``conf/`` composed with ``+experiment=<experiment>`` and ``overrides``, as
    ``python -m sweeps run +experiment=<experiment> <overrides...>`` does.

    Args:
        experiment: a file of ``conf/experiment/`` (``"quickstart"``, ``"digits_asha"``...); None: no experiment.
        overrides: Hydra overrides, e.g. ``["sweep.num_samples=4", "scheduler=fifo"]``.
        progress: show the status line (one line updated in place in a notebook or a terminal).

    Returns:
        The sweep's :class:`SweepResult`; a sweep with no successful trial, one the stall watchdog ended, or
        one an operator stopped (``sweeps stop`` from another shell: status ``interrupted``, resumable) returns
        too (``status`` and ``exit_code`` say so).

    Raises:
        BadInput: (a ``ValueError``) every problem of the config at once, before anything starts.
        SweepInterrupted: (a ``KeyboardInterrupt``) Ctrl-C stopped the sweep; it stopped cleanly and resumably.
        SweepsError: the run could not start (an unreachable tracking store, storage that cannot be written...).

    Example:
        ``sweeps.run("quickstart", ["sweep.num_samples=2", "trainable.params.epochs=2"]).trials``
    """
    problems: list[str] = []
    if experiment is not None and (not isinstance(experiment, str) or not experiment or "=" in experiment):
        problems.append(f"experiment: give the name of a file in conf/experiment/ (e.g. 'quickstart'); "
                        f"got {experiment!r}")
    args = _checked_overrides(overrides, problems)
    if problems:
        raise BadInput(*problems)
    head = [f"+experiment={experiment}"] if experiment else []
    return _returned(calls.run_overrides([*head, *args], progress=progress))


def resume(sweep_id: str = "latest", *, retry_errored: bool = False, overrides: Sequence[str] = (),
           progress: bool = True) -> SweepResult:
    """Continue an interrupted or stalled sweep: finished trials are kept, unfinished ones continue from their
    last checkpoint (errored ones too with ``retry_errored``). ``overrides`` may change what does not redefine
    the sweep (e.g. ``sweep.max_concurrent_trials=1``). Raises as :func:`run` does."""
    problems: list[str] = []
    args = _checked_overrides(overrides, problems)
    if problems:
        raise BadInput(*problems)
    return _returned(calls.resume_sweep(sweep_id, retry_errored, args, progress=progress))


def extend(sweep_id: str, more_trials: int, *, overrides: Sequence[str] = (), progress: bool = True) -> SweepResult:
    """Add ``more_trials`` trials to a finished sweep, suggested by its restored searcher. Raises as :func:`run`."""
    problems: list[str] = []
    args = _checked_overrides(overrides, problems)
    if not isinstance(more_trials, int) or isinstance(more_trials, bool) or more_trials < 1:
        problems.append(f"more_trials: must be a whole number >= 1, got {more_trials!r}")
    if problems:
        raise BadInput(*problems)
    return _returned(calls.extend_sweep(sweep_id, more_trials, args, progress=progress))


def load(sweep_id: str = "latest") -> SweepResult:
    """A stored sweep (an id or ``"latest"``) read back: its trials from its Ray results, or from its MLflow runs
    when those are gone. Nothing runs.

    Raises:
        BadInput: no such sweep (the message lists the recent ones).
        SweepsError: neither its Ray results nor its MLflow runs can be read.
    """
    from sweeps import store
    from sweeps.api.result import from_record

    return from_record(store.load(sweep_id))


def confirm(sweep_id: str = "latest", *, top_k: int | None = None, seeds: int | None = None,
            overrides: Sequence[str] = (), progress: bool = True) -> Confirmation:
    """Re-run a finished sweep's ``top_k`` best configurations with ``seeds`` fresh seeds each (defaults: the
    sweep's ``confirm.top_k`` and ``confirm.seeds``) and rank them by the pessimistic end of their 95% interval;
    the sweep's report gets a "Confirmed" section. Raises as :func:`run` does."""
    problems: list[str] = []
    args = _checked_overrides(overrides, problems)
    if problems:
        raise BadInput(*problems)
    out = calls.confirm_sweep(sweep_id, top_k, seeds, args, progress=progress)
    if out.interrupted:
        raise SweepInterrupted(out)
    return out


def promote(sweep_id: str = "latest", *, model_name: str | None = None, alias: str = "champion",
            trial_id: str | None = None, force: bool = False, rule: str | None = None,
            confirmed: bool = False) -> Promotion:
    """Register the sweep's best (or ``trial_id``'s, or the confirmed winner's) checkpoint as a servable model
    version at ``alias``, gated on the alias's current champion; the sweep's webhook gets a ``promoted`` event.
    ``str()`` of the result says what happened. See :func:`sweeps.registry.promote.promote` for every argument.

    Raises:
        BadInput: a bad name or alias, an unknown sweep or trial, no successful trial, a checkpoint that cannot
            be loaded or packaged.
        GateRefused: the champion is at least as good (``force=True`` skips the gate).
    """
    from sweeps.ops.notify import notify_promoted
    from sweeps.registry.promote import promote as register

    result = register(sweep_id, model_name=model_name, alias=alias, trial_id=trial_id, force=force, rule=rule,
                      confirmed=confirmed)
    notify_promoted(result.sweep_id, str(result))
    return result


def status(sweep: str = "latest") -> dict[str, Any]:
    """A sweep's status, as its driver last wrote it into the sweep's storage (from any machine that reads it):
    ``state``, ``driver`` (host, pid, lease, launched by), ``trials`` (running, waiting, done, stopped_early,
    failed), ``best``, ``elapsed_s``, ``left``, ``held`` (CPUs, GPUs, nodes), ``last_progress``, ``paused``,
    ``alive`` (the driver's lease holds). ``sweep``: an id, ``"latest"``, or the experiment folder's URI."""
    from sweeps.ops import operate

    return operate.status(sweep)


def stop(sweep: str = "latest", *, now: bool = False, wait_s: float = 300.0) -> dict[str, Any]:
    """Stop a running sweep: gracefully (no trial starts; running trials end once they saved a checkpoint again),
    or ``now``. The sweep ends as after SIGTERM (status interrupted, resumable). Returns the driver's answer,
    ``applied`` once the sweep stops (waited for up to ``wait_s``; 0: the first answer, ``accepted``); raises
    BadInput when it cannot apply (not running, a stop already pending, its driver gone)."""
    from sweeps.ops import operate

    return operate.send(sweep, "stop_now" if now else "stop", wait_applied_s=wait_s)


def pause(sweep: str = "latest") -> dict[str, Any]:
    """Hold a running sweep: no trial starts until :func:`unpause`; running trials go on."""
    from sweeps.ops import operate

    return operate.send(sweep, "pause")


def unpause(sweep: str = "latest") -> dict[str, Any]:
    """Let a paused sweep start trials again."""
    from sweeps.ops import operate

    return operate.send(sweep, "unpause")


def stop_trial(sweep: str, trial_id: str) -> dict[str, Any]:
    """End one trial of a running sweep at its next report, as a scheduler's early stop (checkpoint kept)."""
    from sweeps.ops import operate

    return operate.send(sweep, "trial_stop", trial_id)
