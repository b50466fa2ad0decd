"""What the Python API hands back: a sweep as data (its trials as a DataFrame, the best trial, its links)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps.errors import EXIT_OK, EXIT_RUN_FAILED

if TYPE_CHECKING:
    import pandas as pd

    from sweeps.ops.run import Outcome
    from sweeps.reports.confirmed import Interval
    from sweeps.reports.results import TrialRecord
    from sweeps.reports.summary import Summary
    from sweeps.store import SweepRecord

EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class BestTrial:
    """The sweep's best trial: its best finite value of the sweep metric and its hyperparameters."""

    trial_id: str
    metric: str
    mode: str
    value: float
    params: dict[str, Any]


@dataclass
class SweepResult:
    """A sweep, finished or not, as a notebook or a script reads it.

    Attributes:
        sweep_id: the id every command takes (``python -m sweeps report SWEEP_ID``).
        status: ``finished``, ``failed`` (no trial succeeded), ``interrupted`` (resumable), ``stalled`` (ended by
            the stall watchdog; resumable) or ``running`` (a sweep another process still runs).
        exit_code: what ``python -m sweeps`` exits with for this sweep: 0, 1 (failed or stalled), 3 (the champion
            gate refused the automatic promotion), 130 (interrupted); None while it runs.
        record: the sweep's index record (config, counts, hours, where everything is).
        summary: the pure summary the report is drawn from.
        outcome: the run pipeline's outcome, for a sweep run by this call (None for :func:`sweeps.load`).
    """

    sweep_id: str
    status: str
    exit_code: int | None
    record: SweepRecord = field(repr=False)
    summary: Summary = field(repr=False)
    outcome: Outcome | None = field(default=None, repr=False)
    _records: list[TrialRecord] | None = field(default=None, repr=False)
    _trials: Any = field(default=None, repr=False)

    @property
    def trial_records(self) -> list[TrialRecord]:
        """Every trial with its per-epoch history, status, error and best checkpoint (read once, on first use)."""
        if self._records is None:
            from sweeps.reports.load import load_sweep

            self._records = load_sweep(self.record)[0]
        return self._records

    @property
    def trials(self) -> pd.DataFrame:
        """The trials as a pandas DataFrame: the same rows and columns as the report's ``trials.csv`` (ranked
        trials first, best first; ``param/<name>``, ``best/<metric>``, ``final/<metric>``, ``status``...)."""
        if self._trials is None:
            from sweeps.reports.trialindex import model_ids
            from sweeps.reports.write import trials_table

            self._trials = trials_table(self.record, self.trial_records, self.summary, model_ids(self.record))
        return self._trials

    @property
    def best(self) -> BestTrial | None:
        """The best trial; None when no trial ended without error and with a finite value of the metric."""
        b = self.summary.best
        if b is None:
            return None
        return BestTrial(b.trial_id, self.summary.metric, self.summary.mode, b.best, dict(b.params))

    @property
    def report_path(self) -> Path | None:
        """The sweep's ``report.html`` (None when no report was written: ``report.enabled=false``)."""
        folder = self.record.report_dir
        return Path(folder) / "report.html" if folder else None

    @property
    def parent_run_id(self) -> str | None:
        """The sweep's MLflow parent run (its trials are its nested child runs)."""
        return self.record.parent_run_id or None

    @property
    def mlflow_url(self) -> str | None:
        """The parent run's page in the MLflow UI (for the local store: what ``python -m sweeps ui`` serves)."""
        from sweeps.tracking import links

        rec = self.record
        if not (rec.mlflow_experiment_id and rec.parent_run_id):
            return None
        return links.run_url(rec.tracking_uri, rec.mlflow_experiment_id, rec.parent_run_id)

    def __repr__(self) -> str:
        best = self.best
        shown = f"{best.metric}={best.value:.4g} ({best.trial_id})" if best else "none"
        return (f"SweepResult(sweep_id={self.sweep_id!r}, status={self.status!r}, exit_code={self.exit_code}, "
                f"trials={self.summary.counts.get('total', 0)}, best={shown})")


def from_outcome(outcome: Outcome) -> SweepResult:
    """The result of a sweep this process ran (or resumed, or extended)."""
    status = "stalled" if outcome.stalled else outcome.record.status
    return SweepResult(outcome.record.sweep_id, status, outcome.exit_code, outcome.record, outcome.summary,
                       outcome=outcome)


def from_record(rec: SweepRecord) -> SweepResult:
    """A stored sweep, read back from its Ray results (or its MLflow runs when those are gone)."""
    from sweeps.reports.load import load_sweep

    records, summ = load_sweep(rec)
    status = "stalled" if rec.status == "interrupted" and rec.stop_reason == "stalled" else rec.status
    return SweepResult(rec.sweep_id, status, stored_exit_code(status, summ), rec, summ, _records=records)


def stored_exit_code(status: str, summ: Summary) -> int | None:
    """A stored sweep's exit code, as its run would have ended (a refused auto-promotion is not recorded)."""
    if status == "running":
        return None
    if status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if status == "finished" and summ.best is not None else EXIT_RUN_FAILED


@dataclass
class Confirmation:
    """What :func:`sweeps.confirm` hands back: each re-run configuration's 95% interval, best first.

    Attributes:
        sweep_id: the confirmed sweep.
        metric: the sweep metric the intervals are of.
        intervals: one per configuration: ``digest``, ``params``, ``mean``, ``std``, ``low``, ``high``, ``n``,
            ranked by the pessimistic end of the interval.
        note: what to make of it (e.g. the sweep's best was a lucky seed), or None.
        report_path: the sweep's report, rebuilt with a "Confirmed" section.
        interrupted: Ctrl-C stopped the re-runs (the intervals cover what finished).
    """

    sweep_id: str
    metric: str
    intervals: list[Interval]
    note: str | None
    report_path: Path
    interrupted: bool = False


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (a notebook's interrupt, SIGTERM) stopped a sweep, cleanly: its record says ``interrupted``, its
    MLflow runs ended KILLED, and ``sweeps.resume(sweep_id)`` continues it. ``result`` is what it had so far."""

    def __init__(self, result: SweepResult | Confirmation) -> None:
        sid = result.sweep_id
        super().__init__(f"sweep {sid} interrupted; it stopped cleanly: continue it with sweeps.resume({sid!r})"
                         if isinstance(result, SweepResult) else f"confirm of {sid} interrupted")
        self.result = result
