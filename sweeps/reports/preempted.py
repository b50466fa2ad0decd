"""The report's part on node preemptions (spot capacity): which trials were preempted, how often, and the epochs
they lost, as the trials' loops counted them (:mod:`sweeps.preemptions`); pure, rendered by the outline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sweeps.reports.rows import Row


@dataclass(frozen=True)
class Part:
    title: str
    bullets: list[str]
    headers: list[str]
    rows: list[list[str]]


def part(rows: Sequence[Row], max_listed: int) -> Part | None:
    """None when no trial's loop said anything about preemptions (nothing observed: no figure, never a 0)."""
    watched = [r for r in rows if r.preemptions is not None]
    if not watched:
        return None
    hit = [r for r in watched if r.preemptions]
    table = [[r.trial_id, r.status, str(r.preemptions), str(r.epochs_lost)] for r in hit]
    more = [f"{len(table) - max_listed} more trials: see trials.csv"] if len(table) > max_listed else []
    return Part(
        "Node preemptions (spot capacity)",
        [
            f"{len(hit)} trial(s) were preempted, {sum(r.preemptions or 0 for r in hit)} time(s) in all; each resumed "
            f"on another node from the checkpoint its loop saved on Ray's preemption notice, charged by Ray Train "
            f"to failure.max_preemption_failures, not to a failure budget",
            "epochs lost: epochs reported and then redone; the epoch in flight when the node went is lost too "
            "(partly trained, never reported) and is not in the figure",
            f"{len(rows) - len(watched)} trial(s) have no figure: their loop said nothing of preemption notices (no "
            f"notice came, or a loop or a Ray that does not watch for them)",
            *more,
        ],
        ["trial", "status", "preemptions", "epochs lost"],
        table[:max_listed],
    )
