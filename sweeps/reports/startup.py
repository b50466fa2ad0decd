"""The report's "Where the trials' seconds went": each start-up stage's p50/p95 over the trials' MLflow runs,
and the sweep's slot-seconds split into starting, waiting and training (:meth:`Summary.split`).

The stages are the ``startup/<stage>_s`` points the orchestrator adds to each trial's results
(:mod:`sweeps.execution.run.startup`), so they are in the trials' own results (every start) and on their MLflow
runs alike: the report reads the results it already loaded (reading 5,000 runs back from MLflow took longer than
the rest of the report). Where the results lack them, MLflow's runs stand in (a run's latest values are its only
start unless it carries ``startup/restart``: those runs' starts are read from their metric history).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sweeps.execution.run.startup import RESTART, STAGES, TOTAL, metric
from sweeps.reports.outline import Section, Table, fmt
from sweeps.reports.summary import Summary
from sweeps.store import SweepRecord

log = logging.getLogger(__name__)

WORDS = {
    "pg_wait": "placement-group wait (the trial's and its workers')", "trial_actor": "trial actor",
    "train_controller": "Train controller",
    "worker_group": "worker group (processes, actors, torch process group)",
    "loop_setup": "loop set-up (to its first forward pass)", "first_epoch": "first epoch (to its first result)",
}


def from_mlflow(rec: SweepRecord) -> list[dict[str, float]]:
    """Every start's ``startup/`` metrics, read from the sweep's MLflow runs: a run's latest values, or, for a
    run that started more than once, each start from its metric history."""
    from sweeps.tracking.client import client

    c = client(rec.tracking_uri)
    query = f"tags.mlflow.parentRunId = '{rec.parent_run_id}'"
    out: list[dict[str, float]] = []
    token = None
    while True:
        page = c.search_runs([rec.mlflow_experiment_id], query, max_results=1000, page_token=token)
        for r in page:
            latest = {k: float(v) for k, v in r.data.metrics.items() if k.startswith("startup/")}
            out += every_start(c, r.info.run_id, latest) if RESTART in latest else [latest]
        token = page.token
        if not token:
            return [m for m in out if TOTAL in m]


def every_start(c: Any, run_id: str, latest: Mapping[str, float]) -> list[dict[str, float]]:
    """Each start of one run: its ``startup/`` metrics' histories, grouped by the result that logged them
    (one step and timestamp per result)."""
    starts: dict[tuple[int, int], dict[str, float]] = {}
    for key in latest:
        for m in c.get_metric_history(run_id, key):
            starts.setdefault((m.step, m.timestamp), {})[key] = float(m.value)
    return [starts[k] for k in sorted(starts)]


def from_results(records: Sequence[Any]) -> list[dict[str, float]]:
    """Every start's ``startup/`` figures, from the trials' own results."""
    return [{k: v for k, v in h.items() if k.startswith("startup/")} for r in records for h in r.history
            if TOTAL in h]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile, linear between the closest ranks (numpy's default)."""
    xs = sorted(values)
    at = (len(xs) - 1) * q
    lo, hi = math.floor(at), math.ceil(at)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def table(starts: Sequence[Mapping[str, float]]) -> Table:
    """Stage | p50 | p95 | mean | starts: every stage that some start measured, then the total."""
    rows = []
    for stage, key in [*((s, metric(s)) for s in STAGES), ("total", TOTAL)]:
        values = [m[key] for m in starts if key in m]
        if values:
            rows.append([WORDS.get(stage, stage), fmt(quantile(values, 0.5)), fmt(quantile(values, 0.95)),
                         fmt(sum(values) / len(values)), str(len(values))])
    return Table(["stage", "p50 s", "p95 s", "mean s", "starts"], rows)


def section(rec: SweepRecord, records: Sequence[Any], summ: Summary) -> Section:
    """The section: the split of the slot-seconds, then the stage table (from MLflow, else the results)."""
    bullets = []
    words = summ.split_words()
    if words:
        bullets.append(f"the sweep's {summ.slots} slot(s) x {summ.wall_s:.1f} s wall: {words} (starting: "
                       f"{summ.starts_measured} start(s) until their first batch, less their wait for room; "
                       "training: the trials' training time; waiting: the rest)")
    starts, source = from_results(records), "the trials' results (every start; their MLflow runs hold the same)"
    if not starts and rec.parent_run_id and rec.mlflow_experiment_id:
        try:  # results without the points (a sweep recorded before they were added to them)
            starts, source = from_mlflow(rec), "the trials' MLflow runs (every start)"
        except Exception as exc:  # a store down: nothing to show
            log.debug("start-up figures not read from MLflow (%s)", exc)
    if not starts:
        return Section("Where the trials' seconds went",
                       [*bullets, "no start was measured (the trials sent no start-up points)"])
    bullets.append(f"each start, from Tune taking the trial up to its first result at the driver, by stage; from "
                   f"{source}; a stage a start could not measure counts in the next")
    return Section("Where the trials' seconds went", bullets, [table(starts)])
