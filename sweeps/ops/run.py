"""The run pipeline: compose -> spec -> plan -> tune (+ track) -> report -> promote.

Each stage takes the previous stage's object. Nothing here touches Ray, MLflow or disk until the whole config
has been validated and the plan fits (:mod:`sweeps.ops.prepare`, :mod:`sweeps.ops.launch`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps import store, uris
from sweeps.config import redaction, stored
from sweeps.config.spec import SweepSpec
from sweeps.execution.cluster import memory
from sweeps.execution.resources.plan import per_trial
from sweeps.execution.run import livestatus, recovery
from sweeps.execution.run.owner import Run
from sweeps.ops.heartbeat import Heartbeat, driver_fields
from sweeps.ops.launch import launched, listeners, stop_ray_while
from sweeps.ops.signals import STOP_DRAIN_S, Signals, shielded
from sweeps.reports import summary
from sweeps.tracking.parent import finish_parent, make_tracker, open_parent

log = logging.getLogger(__name__)
MLFLOW_STATUS = {"finished": "FINISHED", "interrupted": "KILLED"}  # anything else: FAILED


@dataclass
class Outcome:
    """What a finished (or interrupted) sweep hands back to the CLI."""

    record: store.SweepRecord
    summary: summary.Summary
    interrupted: bool = False
    stalled: str | None = None  # why the stall watchdog stopped the sweep (sweeps.execution.run.stall)
    missing_metric: str | None = None  # why a report without the sweep's metric ended it (execution.firstreport)
    report_paths: list[str] = field(default_factory=list)
    promotion: str | None = None
    promotion_refused: bool = False  # the champion gate refused the automatic promotion

    @property
    def succeeded(self) -> bool:
        """At least one trial ended without error and with a finite value of the sweep metric."""
        return self.summary.best is not None

    @property
    def exit_code(self) -> int:
        """2 a report lacked the sweep's metric (fix the config, start again), 1 stalled (resumable), 130
        interrupted (resumable), 1 no trial succeeded, 3 the gate refused the auto-promotion, else 0."""
        from sweeps.errors import EXIT_BAD_INPUT, EXIT_GATE_REFUSED, EXIT_OK, EXIT_RUN_FAILED

        if self.missing_metric:
            return EXIT_BAD_INPUT
        if self.stalled:
            return EXIT_RUN_FAILED
        if self.interrupted:
            return 130
        if not self.succeeded:
            return EXIT_RUN_FAILED
        return EXIT_GATE_REFUSED if self.promotion_refused else EXIT_OK


def new_record(spec: SweepSpec, sweep_id: str, overrides: Sequence[str], exp_id: str, parent: str, slots: int,
               schedule: str | None, previous: str | None) -> store.SweepRecord:
    """The index record of a sweep that is about to start."""
    return store.SweepRecord(
        sweep_id=sweep_id, experiment=spec.sweep.name, created=time.time(), status="running",
        storage_path=spec.storage_path, experiment_dirs=[uris.join(spec.storage_path, sweep_id)],
        tracking_uri=spec.tracking.uri, mlflow_experiment_id=exp_id, parent_run_id=parent,
        overrides=redaction.redact_overrides(overrides), config=spec.redacted(), digest=spec.digest(),
        metric=spec.sweep.metric, mode=spec.sweep.mode, searcher=spec.searcher_name, scheduler=spec.scheduler_name,
        schedule=schedule, previous_sweep_id=previous, slots=slots, per_trial=per_trial(spec), **driver_fields(),
        listeners=listeners(spec),
    )


def execute(spec: SweepSpec, overrides: Sequence[str], *, schedule: str | None = None,
            previous: str | None = None, points: list[dict[str, Any]] | None = None,
            searcher_state_dir: str | None = None) -> Outcome:
    """Run a validated sweep end to end."""
    from sweeps.execution.run.owner import Run
    from sweeps.execution.tuning.searchers import restored_searcher

    with launched(spec) as (the_plan, c):
        sweep_id = store.new_sweep_id(spec.sweep.name)
        c, exp_id, parent = open_parent(spec, sweep_id, overrides, schedule, previous,
                                        listeners=listeners(spec))
        rec = new_record(spec, sweep_id, overrides, exp_id, parent, the_plan.concurrent_trials, schedule, previous)
        try:
            store.save(rec)
            log.info("sweep %s: %s trial(s), %d at a time; results in %s", sweep_id,
                     the_plan.total_trials or "unbounded", the_plan.concurrent_trials, rec.experiment_dir)
            tracker = make_tracker(spec, rec)
            searcher = None
            if searcher_state_dir:
                searcher = restored_searcher(spec, 0, searcher_state_dir, points)
            run = Run.new(spec, the_plan, sweep_id, [tracker], points=points, searcher=searcher)
        except BaseException as exc:
            abandon(c, rec, exc)
            raise
        return fit_and_finish(spec, rec, run, tracker, c, the_plan)


def abandon(c: Any, rec: store.SweepRecord, exc: BaseException) -> None:
    """A sweep that failed before Tune started: its parent run and record end FAILED (KILLED on Ctrl-C)."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    try:
        store.update(rec.sweep_id, status="interrupted" if interrupted else "failed", lease_expires=None)
    except Exception as err:  # the record may not have been written yet
        log.debug("could not update the record of %s: %s", rec.sweep_id, err)
    try:
        c.set_tag(rec.parent_run_id, "error", redaction.scrub(str(exc))[:500] or type(exc).__name__)
        c.set_terminated(rec.parent_run_id, status="KILLED" if interrupted else "FAILED")
    except Exception as err:
        log.warning("MLflow: could not close the parent run %s (%s)", rec.parent_run_id, err)


def fit_and_finish(spec: SweepSpec, rec: store.SweepRecord, run: Run, tracker: Any, c: Any,
                   plan: Any = None) -> Outcome:
    """Fit; whatever happens, leave every MLflow run final and the index record honest. With ``plan`` and
    ``confirm.enabled``, re-run the top configurations with fresh seeds before the report and promotion."""
    t0 = time.monotonic()
    status, interrupted = "failed", False
    signals = Signals(on_stop=lambda: setattr(tracker, "drain_s", STOP_DRAIN_S), interrupt=run.interrupt)
    try:
        with signals, Heartbeat(rec.sweep_id, c, rec.parent_run_id, also=run.beat):
            run.fit()
        interrupted = signals.interrupted
        status = "interrupted" if interrupted else "finished"
    except KeyboardInterrupt:
        interrupted, status = True, "interrupted"
        tracker.drain_s = STOP_DRAIN_S
    finally:
        with shielded("closing the MLflow runs and the sweep's record"):
            wall = time.monotonic() - t0 + (rec.wall_s or 0.0)
            tracker.close_open("KILLED")
            records_ = _records(spec, rec, settled=status == "finished")
            cpus, gpus = stored.cpus_gpus(per_trial(spec))
            summ = summary.collect(records_, spec.sweep.metric, spec.sweep.mode, top_k=spec.report.top_k,
                                   max_epochs=spec.trainable.epochs, wall_s=wall, slots=rec.slots,
                                   cpus_per_trial=cpus, gpus_per_trial=gpus)
            seen = run.outcome()  # its running_s: what the time budget counted, pauses left out
            budget_hit = spec.sweep.time_budget_s is not None and (seen.running_s or wall) >= spec.sweep.time_budget_s
            unfinished = recovery.unfinished_in(records_, rec.experiment_dirs[-1]) or seen.halted
            if status == "finished" and unfinished and not budget_hit:
                interrupted, status = True, "interrupted"  # Tune returns normally after Ctrl-C and `sweeps stop`
            if status == "finished" and summ.best is None:
                status = "failed"  # no trial succeeded: nothing to report as a result
            reason = _stop_reason(spec, summ, budget_hit) if status == "finished" else None
            stuck, lacking = seen.stalled, seen.metric_missing
            if stuck and interrupted:
                reason = "stalled"
                _tag_error(c, rec, f"stalled: {stuck}")
            reason = reason or ("stopped" if interrupted and seen.stopped_by else None)  # `sweeps stop`
            if lacking:  # not resumable: the metric is part of the sweep's digest; the fix is a new run
                interrupted, status, reason = False, "failed", "metric_missing"
                _tag_error(c, rec, lacking)
            rec = _close_record(rec, c, status, wall, summ, tracker.timer, reason, seen.hours,
                                _front(spec, records_), seen.running_s)
            run.end()
            _rank_models(c, rec, summ)
    out = Outcome(record=rec, summary=summ, interrupted=interrupted, stalled=stuck if interrupted else None,
                  missing_metric=lacking)
    if plan is not None and spec.confirm.enabled and out.succeeded and not interrupted:
        out.record = rec = _confirm(spec, rec, plan, c)

    def without_ray() -> None:  # report, promotion, webhook, drawn while Ray stops (nothing here touches Ray)
        if spec.report.enabled and not lacking:  # lacking: no trial reported the metric, nothing to report
            out.report_paths = _report(rec, records_, summ, spec, c)
            out.record = store.load(rec.sweep_id)  # now with its report folder
        if spec.promote.enabled and status == "finished":
            out.promotion, out.promotion_refused = _promote(rec, spec)
        _announce(spec, out)

    stop_ray_while(without_ray)
    return out


def _tag_error(c: Any, rec: store.SweepRecord, why: str) -> None:
    try:
        c.set_tag(rec.parent_run_id, "error", redaction.scrub(why)[:4000])
    except Exception as exc:  # the record still says it
        log.warning("MLflow: could not tag the parent run with why the sweep ended (%s)", exc)


def _announce(spec: SweepSpec, out: Outcome) -> None:
    """The sweep's events to ``notify.webhook_url``: finished or failed, and promoted (bounded, never raises)."""
    from sweeps.ops import notify

    if out.interrupted or not spec.notify.webhook_url:
        return
    rec = out.record
    notify.send(spec.notify, "finished" if out.succeeded else "failed",
                notify.payload("finished" if out.succeeded else "failed", rec))
    if out.promotion and not out.promotion_refused and out.promotion.startswith("registered"):
        notify.send(spec.notify, "promoted", notify.payload("promoted", rec, text=f"sweeps: {out.promotion}"))


def _confirm(spec: SweepSpec, rec: store.SweepRecord, plan: Any, c: Any) -> store.SweepRecord:
    from sweeps.ops.confirm import run_confirm

    try:
        return run_confirm(spec, rec, plan, c, spec.confirm.top_k, spec.confirm.seeds).record
    except Exception as exc:  # a failed confirmation must not cost the sweep's own results
        log.warning("confirm failed: %s (run it again with `python -m sweeps confirm %s`)", exc, rec.sweep_id)
        return store.load(rec.sweep_id)


def _stop_reason(spec: SweepSpec, summ: summary.Summary, time_budget_hit: bool) -> str | None:
    from sweeps.execution.resources.plan import total_trials

    if time_budget_hit:
        return "time_budget"
    planned = total_trials(spec)
    if spec.sweep.budget.enabled and (planned is None or summ.counts["total"] < planned):
        return "resource_budget"
    return None


def _front(spec: SweepSpec, records_: list[Any]) -> list[dict[str, Any]]:
    """Multi-objective: every trial's point and Pareto rank (feasible first), for the record and the tags."""
    if not spec.sweep.multi:
        return []
    from sweeps.reports.pareto import points, to_dicts

    return to_dicts(points(records_, spec.sweep.objectives, spec.sweep.constraints))


def _rank_models(c: Any, rec: store.SweepRecord, summ: summary.Summary) -> None:
    """Each trial model's place in the report; the parent run names the best model (MLflow's Models tab)."""
    from sweeps.tracking import models

    try:
        models.rank(c, rec.mlflow_experiment_id, rec.sweep_id, summ.ranked, rec.parent_run_id)
    except Exception as exc:  # a store without LoggedModels, or one down: the runs and the report stand
        log.warning("could not rank the sweep's models (%s): their report ranks are missing from the Models tab; "
                    "`python -m sweeps sync %s` ranks them", exc, rec.sweep_id)


def _close_record(rec: store.SweepRecord, c: Any, status: str, wall: float, summ: summary.Summary,
                  timer: Any, stop_reason: str | None, hours: dict[str, float | None],
                  pareto: list[dict[str, Any]], running_s: float | None = None) -> store.SweepRecord:
    """The index record and the parent run say how the sweep ended."""
    best = {}
    if summ.best is not None:
        best = {"trial_id": summ.best.trial_id, "value": summ.best.best, "params": summ.best.params}
    rec = store.update(rec.sweep_id, status=status, wall_s=wall, best=best, counts=summ.counts,
                       stop_reason=stop_reason, lease_expires=None, hours=hours, pareto=pareto,
                       driver_peak_rss_mb=memory.peak_rss_mb(), running_s=running_s, live_state="")
    livestatus.final(rec.experiment_dirs[-1], "stalled" if stop_reason == "stalled" else status,
                     dict(summ.counts), best)
    try:
        finish_parent(c, rec, MLFLOW_STATUS.get(status, "FAILED"), timer.seconds, timer.loop_seconds)
    except Exception as exc:
        log.warning("MLflow: could not finish the parent run (%s); `sweeps sync %s` retries", exc, rec.sweep_id)
    return rec


def _records(spec: SweepSpec, rec: store.SweepRecord, settled: bool) -> list[Any]:
    """The sweep's trials as Tune left them; the state it saved last is kept first, as the last good set."""
    from sweeps.reports.results import load_records
    recovery.keep_final(rec.experiment_dirs[-1])
    try:
        return load_records(rec.experiment_dirs, spec.sweep.metric, spec.sweep.mode, spec.trainable.epochs,
                            settled=settled, keep=True)
    except Exception as exc:  # a sweep that died before Tune wrote its state has no trials
        log.warning("could not read trial results from %s (%s)", rec.experiment_dirs, exc)
        return []


def _report(rec: store.SweepRecord, records_: list[Any], summ: summary.Summary, spec: SweepSpec,
            c: Any) -> list[str]:
    from sweeps.reports.write import write_all

    try:
        out_dir = Path(spec.report.dir) / rec.experiment / rec.sweep_id
        from sweeps.reports.trialindex import model_ids

        written = write_all(rec, records_, summ, out_dir, model_ids(rec, keep=False))
        store.update(rec.sweep_id, report_dir=str(out_dir.resolve()))
        try:
            c.log_artifacts(rec.parent_run_id, str(out_dir), artifact_path="report")
        except Exception as exc:
            log.warning("MLflow: could not upload the report (%s)", exc)
        return [str(p) for p in written]
    except Exception as exc:  # a report failure must not lose the sweep
        log.exception("report failed: %s (rebuild with `python -m sweeps report %s`)", exc, rec.sweep_id)
        return []


def _promote(rec: store.SweepRecord, spec: SweepSpec) -> tuple[str, bool]:
    """(what happened, whether the champion gate refused it)."""
    from sweeps.errors import GateRefused
    from sweeps.registry.promote import promote

    try:
        res = promote(rec.sweep_id, model_name=spec.promote.model_name, alias=spec.promote.alias,
                      rule=spec.promote.rule, confirmed=spec.promote.require_confirmed)
        return str(res), False
    except GateRefused as exc:
        return f"not promoted: {exc}", True
    except Exception as exc:
        log.warning("auto-promotion failed: %s", exc)
        return f"promotion failed: {exc}", False
