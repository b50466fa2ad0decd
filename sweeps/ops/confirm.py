"""``confirm``: re-run a sweep's top-k configurations with fresh seeds at the full budget, and rank them by
the pessimistic end of their 95% interval (``python -m sweeps confirm SWEEP_ID --top-k 3 --seeds 5``).

The re-runs are Ray Tune trials of their own experiment (``<sweep>-confirm<N>``, listed in the record's
``confirm_dirs``), with no early stopping, logged as child runs of the sweep's parent run and tagged with their
configuration's digest (``sweeps.config_digest``) so the MLflow UI groups them. The intervals go into the
record (``confirmed``), the parent run's tags and the report's "Confirmed" section. A configuration confirmed
again pools its re-runs: each interval holds every fresh seed of that configuration across the sweep's confirms
(its ``n``), and the confirm says which configurations did.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from sweeps import store, uris
from sweeps.config.spec import BudgetCfg, SweepSpec
from sweeps.errors import BadInput
from sweeps.ops.heartbeat import Heartbeat, refuse_if_live
from sweeps.ops.signals import Signals

log = logging.getLogger(__name__)
FIFO = {"name": "fifo", "_target_": "ray.tune.schedulers.FIFOScheduler"}
BASIC = {"name": "random", "_target_": "ray.tune.search.basic_variant.BasicVariantGenerator"}
SEED_BASE = 10_000  # confirm seeds never collide with the sweep's own (sweep.seed + a few)


@dataclass
class Confirmed:
    """What ``confirm`` hands back to the CLI."""

    record: store.SweepRecord
    intervals: list[Any]
    note: str | None
    interrupted: bool = False


def top_configs(rec: store.SweepRecord, k: int) -> list[dict[str, Any]]:
    """The sweep's k best distinct configurations (seed aside), best first."""
    from sweeps.reports.results import load_records
    from sweeps.reports.summary import collect
    from sweeps.trials import config_digest

    summ = collect(load_records(rec.experiment_dirs, rec.metric, rec.mode), rec.metric, rec.mode)
    by_id = {r.trial_id: r for r in summ.rows}
    out: dict[str, dict[str, Any]] = {}
    for tid in summ.ranked:
        params = {p: v for p, v in by_id[tid].params.items() if p != "seed"}
        out.setdefault(config_digest(params), params)
        if len(out) == k:
            break
    return list(out.values())


def confirm_spec(spec: SweepSpec, points: list[dict[str, Any]]) -> SweepSpec:
    """The sweep's spec, re-running exactly ``points``: no search, no early stopping, no resource budget."""
    sweep = dataclasses.replace(spec.sweep, num_samples=len(points), points_to_evaluate=tuple(points),
                                budget=BudgetCfg())
    return dataclasses.replace(spec, sweep=sweep, scheduler=dict(FIFO), searcher=dict(BASIC),
                               space=points_space(points))


def points_space(points: list[dict[str, Any]]) -> dict[str, Any]:
    """A space holding exactly the points' values: Tune requires every preset key in the space."""
    out: dict[str, dict[str, Any]] = {}
    for point in points:
        for key, value in point.items():
            values = out.setdefault(key, {"dist": "choice", "values": []})["values"]
            if value not in values:
                values.append(value)
    return out


def run_confirm(spec: SweepSpec, rec: store.SweepRecord, plan: Any, c: Any, top_k: int, seeds: int) -> Confirmed:
    """Run the re-runs (Ray must be up) and record their intervals."""
    from sweeps.execution.run.owner import Run
    from sweeps.reports.confirmed import intervals, winner_note
    from sweeps.reports.results import load_records
    from sweeps.tracking.parent import make_tracker

    configs = top_configs(rec, top_k)
    if not configs:
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} has no successful trial to confirm")
    points = [{**cfg, "seed": SEED_BASE + 100 * len(rec.confirm_dirs) + s} for cfg in configs for s in range(seeds)]
    cspec = confirm_spec(spec, points)
    name = f"{rec.sweep_id}-confirm{len(rec.confirm_dirs) + 1}"
    rec = store.update(rec.sweep_id, confirm_dirs=[*rec.confirm_dirs, uris.join(spec.storage_path, name)])
    tracker = make_tracker(cspec, rec, confirm=True)
    run = Run.new(cspec, plan, rec.sweep_id, [tracker], points=points, num_samples=len(points), name=name)
    signals = Signals(interrupt=run.interrupt)
    try:
        with signals, Heartbeat(rec.sweep_id, c, rec.parent_run_id, also=run.beat):
            run.fit()
    finally:
        tracker.close_open("KILLED")
        run.end()
    found = intervals(load_records(rec.confirm_dirs, rec.metric, rec.mode), rec.metric, rec.mode)
    note = winner_note(found, (rec.best or {}).get("params"))
    pooled = [i.digest for i in found if i.n > seeds]
    if pooled:  # every fresh seed of a configuration is evidence: an earlier confirm's re-runs count as well
        note = " ".join(filter(None, [note, f"{', '.join(pooled)} also count(s) the re-runs of an earlier confirm "
                                            f"(n above {seeds})."]))
    rows = [{"digest": i.digest, "params": i.params, "n": i.n, "mean": i.mean, "std": i.std, "low": i.low,
             "high": i.high, "pessimistic": i.pessimistic} for i in found]
    rec = store.update(rec.sweep_id, confirmed=rows)
    if found:
        c.set_tag(rec.parent_run_id, "confirmed_winner", found[0].digest)
        c.set_tag(rec.parent_run_id, "confirmed_pessimistic", f"{found[0].pessimistic:.6g}")
    return Confirmed(rec, found, note, interrupted=signals.interrupted)


def confirm(sweep_id: str, top_k: int | None = None, seeds: int | None = None,
            extra: list[str] | None = None) -> Confirmed:
    """Re-run a finished sweep's top configurations with fresh seeds."""
    from sweeps.ops.launch import launched
    from sweeps.ops.prepare import spec_for

    rec = store.load(sweep_id)
    refuse_if_live(rec, "confirm")
    if rec.status != "finished":
        raise BadInput(f"SWEEP_ID: sweep {rec.sweep_id} is {rec.status}; confirm a finished sweep (resume it first)")
    spec = spec_for(rec, extra or [])
    k, n = top_k or spec.confirm.top_k, seeds or spec.confirm.seeds
    if k < 1 or n < 2:
        raise BadInput(f"--top-k must be >= 1 and --seeds >= 2 (an interval needs two runs), got {k} and {n}")
    with launched(spec) as (the_plan, c):
        c.update_run(rec.parent_run_id, status="RUNNING")
        try:
            out = run_confirm(spec, rec, the_plan, c, k, n)
        finally:
            c.set_terminated(rec.parent_run_id, status="FINISHED")
    return out
