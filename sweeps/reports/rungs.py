"""The report's "Rungs" section for promotion ASHA and PASHA (``scheduler=asha_promote|pasha``): trials, promotions
and epochs per rung, and where PASHA stopped raising its top rung.

Read from the scheduler state the sweep saved with its experiment (:func:`sweeps.execution.run.schedstate.
saved_state`: the schedulers' own JSON, by trial id), so the report says what the scheduler decided, not what a
replay of the results would.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from sweeps.reports.outline import Section, Table
from sweeps.store import SweepRecord

log = logging.getLogger(__name__)
PROMOTING = ("PromotionASHA", "PASHA")


def rung_section(state: Mapping[str, Any] | None, trained: int | None = None) -> Section | None:
    """The section from a saved scheduler state (pure); None for any other scheduler's. ``trained``: the epochs
    the trials trained in all (their results): where it is more than the rungs count, the section says why."""
    if not state or state.get("kind") not in PROMOTING or state.get("how") != "own":
        return None
    lad = json.loads(state["data"])
    levels = [float(x) for x in lad["levels"]]
    rows, spent, below = [], 0.0, 0.0
    for level, table, promoted in zip(levels, lad["rungs"], lad["promoted"], strict=True):
        epochs = len(table) * (level - below)  # each trial that reached the rung trained from the one below
        spent += epochs
        rows.append([f"{level:g}", str(len(table)), str(len(promoted)), f"{epochs:g}"])
        below = level
    bullets = [f"epochs trained to reach the rungs: {spent:g} (trials that ended between two rungs not counted)"]
    if trained is not None and trained > spent:
        bullets.append(f"epochs the trials trained in all: {trained} ({trained - spent:g} past the rungs counted: "
                       "a trial stopped between two rungs, or one that was waiting for a promotion at a stop and "
                       "ran on after the resume, counts at its rung until it is promoted)")
    if state["kind"] == "PASHA":
        top = levels[int(lad["top"])]
        raises = ", ".join(f"{r['to']:g}" for r in lad["raises"]) or "never raised"
        bullets.append(f"PASHA stopped raising its top rung at {top:g} of {levels[-1]:g} (raised to: {raises}; "
                       f"epsilon {lad['epsilon']:g}): the top two rungs ranked their trials alike from there")
    return Section("Rungs", bullets, [Table(["rung", "trials reached it", "promoted from it", "epochs to reach it"],
                                            rows)])


def section(rec: SweepRecord, trained: int | None = None) -> Section | None:
    """The "Rungs" section of a sweep that ran a promoting scheduler, else None (never raises)."""
    if rec.scheduler not in ("asha_promote", "pasha"):
        return None
    try:
        from sweeps.execution.run.schedstate import saved_state

        return rung_section(saved_state(list(rec.experiment_dirs)), trained)
    except Exception as exc:  # the report goes on without the section
        log.warning("the rungs section could not be made (%s)", exc)
        return None
