"""Frees the placement groups of a sweep's Train runs that no live trial owns, without Ray's State API.

docs/ray.md, "Placement groups a stopped trial leaves". A trial's Train controller creates its worker
group's placement group; Ray removes a group whose creator actor died only once the creator's *job* has
ended too, so the group of a trial that a scheduler stopped or paused, or that failed, holds its CPUs until
the sweep ends. Train's own answer, a detached cleaner actor per run that polls the State API, needs the
dashboard and costs a process per trial start. The lean trainer (:mod:`sweeps.execution.warmstart.lean`) names each
group ``sweeps:<sweep>:<trial>:<run>`` instead, and this module removes, with Ray's public placement-group
calls:

- in the sweep's driver, every few seconds (a Tune callback): each named group whose trial is not RUNNING
  (stopped, paused, errored, done) and, when the experiment ends, every group of the sweep;
- in a trial's driver, before it starts a Train run: the groups of the trial's earlier runs (a Tune retry,
  a PBT exploit, a restore), whose controllers died with the earlier trial actor.

Tune sets a trial RUNNING before the trial's function starts, and only that function creates groups, so a
group named after a trial that is not RUNNING at a step of Tune's loop has no live owner. A finished run's
controller removes its own group as it ends (asynchronously), so a group is freed only when it is found
orphaned at two scans in a row: the reaper never races a removal already under way.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "sweeps:"
LIVE = ("PENDING", "PREPARED", "CREATED", "RESCHEDULING")
EVERY_S = 2.0


def pg_name(sweep_id: str, trial_id: str, run_name: str) -> str:
    return f"{PREFIX}{sweep_id}:{trial_id}:{run_name}"


def parse(name: str) -> tuple[str, str] | None:
    """``(sweep_id, trial_id)`` of a group this module names, else None."""
    if not name.startswith(PREFIX):
        return None
    parts = name[len(PREFIX):].split(":")
    return (parts[0], parts[1]) if len(parts) == 3 else None


def live_groups(sweep_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(trial_id, name, table entry)`` for each live placement group of the sweep."""
    import ray

    out = []
    for entry in ray.util.placement_group_table().values():
        owner = parse(entry.get("name") or "")
        if owner and owner[0] == sweep_id and entry.get("state") in LIVE:
            out.append((owner[1], entry["name"], entry))
    return out


def remove(names: list[str]) -> int:
    """Remove the named groups (already gone: skipped); returns how many were removed."""
    import ray

    removed = 0
    for name in names:
        try:
            ray.util.remove_placement_group(ray.util.get_placement_group(name))
            removed += 1
        except ValueError:  # gone between the listing and now
            continue
    return removed


def free_earlier_runs(sweep_id: str, trial_id: str) -> int:
    """In a trial's driver, before its Train run starts: remove the groups of the trial's earlier runs."""
    names = [name for trial, name, _ in live_groups(sweep_id) if trial == trial_id]
    if names:
        log.info("trial %s: freed %d placement group(s) of its earlier Train runs", trial_id, len(names))
    return remove(names)


def orphans(sweep_id: str, running: set[str]) -> list[str]:
    """Names of the sweep's live groups whose trial is not running."""
    return [name for trial, name, _ in live_groups(sweep_id) if trial not in running]


def reaper_callback(sweep_id: str) -> Any:
    """The Tune callback that frees orphaned groups while the sweep runs, and all of them at its end."""
    from ray.tune import Callback

    class Reaper(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.next_at = 0.0
            self.freed = 0
            self.suspects: set[str] = set()  # orphaned at the last scan

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            if time.monotonic() < self.next_at:
                return
            self.next_at = time.monotonic() + EVERY_S
            self.reap({t.trial_id for t in trials if t.status == "RUNNING"})

        def reap(self, running: set[str], at_once: bool = False) -> None:
            try:
                found = orphans(sweep_id, running)
                names = found if at_once else [n for n in found if n in self.suspects]
                self.suspects = set(found) - set(names)
                n = remove(names)
            except Exception as exc:  # the GCS is busy or going away: the next step tries again
                log.debug("placement-group reaper: %s", exc)
                return
            if n:
                self.freed += n
                log.info("freed %d placement group(s) of stopped trials (%s)", n, ", ".join(names))

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            self.reap(set(), at_once=True)

    return Reaper()
