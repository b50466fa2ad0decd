"""The sweep operations the CLI and the Python API share: each returns a result and prints nothing.

``hosted=True`` (the Python API): the process belongs to someone else (a Jupyter kernel, a script), so its
signal handlers are left alone and put back (:func:`sweeps.ops.signals.hosted`) and the status line updates in
place (:mod:`sweeps.api.live`). ``hosted=False`` (the CLI): the process is the sweep's; SIGTERM becomes a
graceful stop and the status line is a log line, as ``python -m sweeps`` has always done.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sweeps.api.live import status_line
from sweeps.api.result import Confirmation, SweepResult, from_outcome

if TYPE_CHECKING:
    from sweeps.config.spec import SweepSpec


@contextmanager
def host(hosted: bool, progress: bool = True) -> Iterator[None]:
    """The process's signals and the status line, as a hosted or an owned run needs them."""
    if not hosted:
        yield
        return
    import os

    from sweeps.ops.signals import hosted as hosted_signals

    before = os.environ.get("SWEEPS_LAUNCHED_BY")
    os.environ["SWEEPS_LAUNCHED_BY"] = "api"  # what `sweeps status` says launched it
    try:
        with hosted_signals(), status_line(progress):
            yield
    finally:
        if before is None:
            os.environ.pop("SWEEPS_LAUNCHED_BY", None)
        else:
            os.environ["SWEEPS_LAUNCHED_BY"] = before


def run_overrides(overrides: Sequence[str], *, hosted: bool = True, progress: bool = True) -> SweepResult:
    """Compose the overrides (``+experiment=NAME``, ``key=value``...), validate, run. An interrupted sweep
    returns its result (status ``interrupted``, exit code 130).

    Raises:
        BadInput: every problem of the composed config, before anything is started or written.
    """
    from sweeps.ops import prepare, run

    with host(hosted, progress):
        spec = prepare.prepare(list(overrides))
        return from_outcome(run.execute(spec, list(overrides)))


def prepare_sweep(overrides: Sequence[str], space: Mapping[str, Any] | None = None) -> SweepSpec:
    """Compose and validate a sweep, as ``run`` does (``space`` replaces the composed search space); nothing
    starts. Raises BadInput."""
    from sweeps.ops import prepare

    return prepare.prepare(list(overrides), space)


def run_prepared(spec: SweepSpec, overrides: Sequence[str], *, hosted: bool = True,
                 progress: bool = True) -> SweepResult:
    """Run a sweep :func:`prepare_sweep` validated (``overrides``: what composed it, for its record)."""
    from sweeps.ops import run

    with host(hosted, progress):
        return from_outcome(run.execute(spec, list(overrides)))


def resume_sweep(sweep_id: str, retry_errored: bool = False, overrides: Sequence[str] = (), *,
                 hosted: bool = True, progress: bool = True) -> SweepResult:
    """Continue an interrupted (or stalled) sweep from Tune's saved state."""
    from sweeps.ops.resume import resume

    with host(hosted, progress):
        return from_outcome(resume(sweep_id, retry_errored=retry_errored, extra=list(overrides)))


def extend_sweep(sweep_id: str, more_trials: int, overrides: Sequence[str] = (), *,
                 hosted: bool = True, progress: bool = True) -> SweepResult:
    """Add trials to a finished sweep, suggested by its restored searcher."""
    from sweeps.ops.resume import extend

    with host(hosted, progress):
        return from_outcome(extend(sweep_id, more_trials, extra=list(overrides)))


def confirm_sweep(sweep_id: str, top_k: int | None = None, seeds: int | None = None,
                  overrides: Sequence[str] = (), *, hosted: bool = True, progress: bool = True) -> Confirmation:
    """Re-run the top configurations with fresh seeds; rebuild the report with their intervals."""
    from sweeps.ops.confirm import confirm
    from sweeps.reports.load import default_report_dir, load_sweep
    from sweeps.reports.write import write_all

    with host(hosted, progress):
        out = confirm(sweep_id, top_k, seeds, list(overrides))
    records, summ = load_sweep(out.record)
    folder = default_report_dir(out.record).resolve()
    from sweeps.reports.trialindex import model_ids

    write_all(out.record, records, summ, folder, model_ids(out.record))
    return Confirmation(out.record.sweep_id, out.record.metric, list(out.intervals), out.note,
                        folder / "report.html", interrupted=out.interrupted)
