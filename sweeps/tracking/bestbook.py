"""The tracker's memory of each running trial's best checkpoint, and the PBT donor it descends from.

Only what the trial's model needs when the trial ends is kept: the best checkpoint so far (ranked as Tune's
retention ranks them, :func:`sweeps.trials.best_of`: a later checkpoint of an equal score wins), the numbers of
the report that came with it, and the donor; nothing of the worse ones, and nothing once the trial has ended.

A resumed sweep's tracker is a new one: before a resumed trial reports again, its best is read back from the
checkpoints still in its folder in storage with the ``result.json`` rows that named them (what the report and
``sync`` choose from), so a better checkpoint from before the stop is not lost to a worse one after it.

PBT: when a trial is exploited, the time and the donor go into its lineage (kept on its run as the tag
``sweeps.lineage``: ``<unix time>:<donor>,...``, so a resumed tracker reads it back); a checkpoint descends from
the donor of the last exploit before the report it came with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeps import uris
from sweeps.trials import best_of, stored_checkpoints

log = logging.getLogger(__name__)

LINEAGE_TAG = "sweeps.lineage"
KEPT_KEYS = ("training_iteration", "timestamp")  # besides the numbers a model's metrics are made of


@dataclass(frozen=True)
class Kept:
    """A trial's best checkpoint so far: where it is, its report's numbers, the PBT donor it descends from."""

    uri: str
    result: dict[str, Any]
    donor: str | None = None


def slim(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report's numbers a model needs: its metrics, step and time (no config, no strings)."""
    from sweeps.tracking.models import metrics_of

    result = result or {}
    return {**metrics_of(result), **{k: result[k] for k in KEPT_KEYS if k in result}}


def parse_lineage(text: str | None) -> list[tuple[float, str]]:
    """``"1700000000.5:t_00001,..."`` -> ``[(1700000000.5, "t_00001"), ...]`` (bad entries skipped)."""
    out = []
    for item in (text or "").split(","):
        when, _, donor = item.partition(":")
        try:
            out.append((float(when), donor))
        except ValueError:
            continue
    return [(t, d) for t, d in out if d]


def format_lineage(lineage: list[tuple[float, str]]) -> str:
    return ",".join(f"{t:.3f}:{d}" for t, d in lineage)


class BestBook:
    """Per running trial: its best checkpoint (:class:`Kept`) and its lineage; :meth:`forget` at its end."""

    def __init__(self, metric: str, mode: str) -> None:
        self.metric, self.mode = metric, mode
        self.kept: dict[str, Kept] = {}
        self.lineage: dict[str, list[tuple[float, str]]] = {}

    def add(self, trial_id: str, uri: str, result: Mapping[str, Any] | None) -> None:
        """A checkpoint the trial reported with ``result``: kept when it ranks at least as well as the best."""
        new = slim(result)
        now = self.kept.get(trial_id)
        pairs = [(now.uri, now.result), (uri, new)] if now else [(uri, new)]
        found = best_of(pairs, self.metric, self.mode)
        if found is not None and found[0] == uri:
            self.kept[trial_id] = Kept(uri, new, self.donor_at(trial_id, new.get("timestamp")))

    def best(self, trial_id: str) -> Kept | None:
        return self.kept.get(trial_id)

    def exploited(self, trial_id: str, donor: str, when: float) -> str:
        """PBT cloned ``donor`` into the trial at ``when``; returns the lineage as its tag's text."""
        self.lineage.setdefault(trial_id, []).append((when, donor))
        return format_lineage(self.lineage[trial_id])

    def donor_at(self, trial_id: str, timestamp: Any) -> str | None:
        """The donor of the last exploit before a report at ``timestamp`` (Tune's whole seconds): None when
        the trial had not been exploited by then."""
        if not isinstance(timestamp, int | float):
            return self.lineage[trial_id][-1][1] if self.lineage.get(trial_id) else None
        before = [d for t, d in self.lineage.get(trial_id, []) if t < timestamp]
        return before[-1] if before else None

    def seed(self, trial_id: str, trial_dir: str, lineage: str | None = None) -> int:
        """A resumed trial: its lineage from its run's tag, then each checkpoint still in its folder, in report
        order, with the row that named it. Returns the number of checkpoints read."""
        if lineage:
            self.lineage[trial_id] = parse_lineage(lineage)
        found = stored_checkpoints(trial_dir, stored_rows(trial_dir))
        for uri, row in found:
            self.add(trial_id, uri, row)
        return len(found)

    def forget(self, trial_id: str) -> None:
        self.kept.pop(trial_id, None)
        self.lineage.pop(trial_id, None)

    def __len__(self) -> int:
        return len(self.kept.keys() | self.lineage.keys())


def stored_rows(trial_dir: str) -> list[dict[str, Any]]:
    """The rows of a trial's ``result.json`` in storage (a half-written last line is skipped)."""
    try:
        text = uris.read_text(uris.join(trial_dir, "result.json"), errors="replace")
    except (FileNotFoundError, OSError):
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def donor_in(lineage: str | None, timestamp: Any) -> str | None:
    """The donor a checkpoint reported at ``timestamp`` descends from, by a run's ``sweeps.lineage`` tag."""
    book = BestBook("", "max")
    book.lineage["t"] = parse_lineage(lineage)
    return book.donor_at("t", timestamp) if isinstance(timestamp, int | float) else None
