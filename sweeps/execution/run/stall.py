"""A sweep that makes no progress says why, in words, and ends (exit 1, resumable) once that has lasted too long.

Progress is a trial starting, reporting or ending. When trials wait and none of that has happened for a while
(twice the longest start-up or report gap seen, at least a minute), the status line is replaced by the reason:
what the waiting trials need, what each node has free, and what holds the rest (the placement groups of this
sweep's trials, groups it cannot name, other jobs' actors, nodes that left). After ``sweep.stall_timeout_s``
(derived when null: 15 minutes, or 5x the longest start-up or report gap seen; 0 = never) the sweep stops the
way Ctrl-C stops it (with no signal: ``control.request_stop``), so Tune saves its state and ``resume``
continues; the driver then exits 1 with the reason.

Only Ray's GCS is asked (``ray.nodes()``, ``placement_group_table()``, and, through the ``gcs_tables`` lever, its
per-node resource and actor tables): no dashboard.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sweeps.execution.warmstart import reaper

log = logging.getLogger(__name__)

DEFAULT_LIMIT_S = 900.0
SAY_EVERY_S = 30.0
MIN_QUIET_S = 60.0
UNFINISHED = ("PENDING", "RUNNING", "PAUSED")


def _fmt(res: dict[str, float]) -> str:
    keys = [k for k in ("CPU", "GPU") if k in res] + sorted(k for k in res if k not in ("CPU", "GPU", "memory",
            "object_store_memory") and not k.startswith(("node:", "accelerator_type")) and "_group_" not in k)
    return ", ".join(f"{k}={res[k]:g}" for k in keys) or "nothing"


class Watch:
    """What the sweep has seen (plain data: Tune pickles its callbacks)."""

    def __init__(self, sweep_id: str, per_trial: dict[str, float], timeout_s: float | None, name: str = "") -> None:
        self.sweep_id, self.per_trial, self.timeout_s = sweep_id, dict(per_trial), timeout_s
        self.name = name or sweep_id  # the run's (its session's) name: an extension's differs from the sweep id
        self.last_progress = time.time()
        self.started: dict[str, float] = {}
        self.last_report: dict[str, float] = {}
        self.longest_s = 0.0  # the longest start-up or gap between two reports seen
        self.said_at = 0.0
        self.stalled: str | None = None
        self.nodes_seen: set[str] = set()

    def progress(self, trial_id: str | None = None, now: float | None = None, start: bool = False) -> None:
        now = time.time() if now is None else now
        if trial_id is not None:
            before = self.started.get(trial_id) if start else self.last_report.get(trial_id, self.started.get(trial_id))
            if start:
                self.started[trial_id] = now
            elif before is not None:
                self.longest_s = max(self.longest_s, now - before)
                self.last_report[trial_id] = now
        self.last_progress = now

    def forget(self, trial_id: str) -> None:
        """The trial ended: its start and last report are no longer needed (a sweep of thousands of trials keeps
        only its unfinished ones')."""
        self.started.pop(trial_id, None)
        self.last_report.pop(trial_id, None)

    def quiet_for(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.last_progress

    def say_after(self) -> float:
        return max(MIN_QUIET_S, 2 * self.longest_s)

    def limit(self) -> float | None:
        if self.timeout_s == 0:
            return None
        return self.timeout_s if self.timeout_s is not None else max(DEFAULT_LIMIT_S, 5 * self.longest_s)


def explain(watch: Watch, trials: list[Any]) -> str:
    """The reason, one sentence per part: waiting trials, free resources per node, what holds the rest."""
    now = time.time()
    pending = [t for t in trials if t.status in ("PENDING", "PAUSED")]
    silent = [t.trial_id for t in trials if t.status == "RUNNING"]
    parts = [f"no trial started or reported for {watch.quiet_for(now):.0f} s"]
    if pending:
        parts.append(f"{len(pending)} trial(s) wait to start, each needing {_fmt(watch.per_trial)}")
    if silent:
        parts.append(f"running without a report since: {', '.join(silent)}")
    try:
        parts += _cluster_story(watch, {t.trial_id: t.status for t in trials})
    except Exception as exc:  # the GCS is busy: say what is known
        parts.append(f"(the cluster's state could not be read: {exc})")
    return "; ".join(parts)


def _cluster_story(watch: Watch, status: dict[str, str]) -> list[str]:
    import ray

    nodes = ray.nodes()
    alive = {n["NodeID"]: n for n in nodes if n.get("Alive")}
    gone = [n["NodeID"][:8] for n in nodes if not n.get("Alive") and n["NodeID"] in watch.nodes_seen]
    watch.nodes_seen |= set(alive)
    free = _free_per_node()
    out = ["free: " + "; ".join(f"node {nid[:8]} ({n.get('NodeManagerAddress')}): "
                                f"{_fmt(free[nid]) if free and nid in free else '?'} of {_fmt(n.get('Resources', {}))}"
                                for nid, n in alive.items())]
    ours, others = [], []
    for entry in ray.util.placement_group_table().values():
        if entry.get("state") == "REMOVED":
            continue
        size = {k: sum(b.get(k, 0.0) for b in entry["bundles"].values()) for k in ("CPU", "GPU")}
        owner = reaper.parse(entry.get("name") or "")
        if owner and owner[0] == watch.sweep_id:
            ours.append(f"trial {owner[1]} ({status.get(owner[1], 'gone')}): {_fmt(size)} {entry['state']}")
        else:
            others.append(f"{entry['placement_group_id'][:8]}: {_fmt(size)} {entry['state']}")
    if ours:
        out.append("held by this sweep's Train worker groups: " + "; ".join(ours))
    if others:
        out.append(f"{len(others)} other placement group(s) (Tune's trial bundles, or another job's): "
                   + "; ".join(others[:8]))
    foreign = _other_jobs_actors()
    if foreign:
        out.append(f"{foreign} live actor(s) of other jobs")
    if gone:
        out.append(f"node(s) that left during the sweep: {', '.join(gone)}")
    return out


def _free_per_node() -> dict[str, dict[str, float]] | None:
    """Available resources per node (the ``gcs_tables`` lever; where it is off, None: the story says '?')."""
    from sweeps.execution.levers import core, gcs_tables

    return gcs_tables.free_per_node() if core.applies(gcs_tables.LEVER) else None


def _other_jobs_actors() -> int:
    import ray

    from sweeps.execution.levers import core, gcs_tables

    if not core.applies(gcs_tables.LEVER):
        return 0
    return gcs_tables.other_jobs_actors(ray.get_runtime_context().get_job_id())


def watchdog_callback(watch: Watch) -> Any:
    """The Tune callback that watches for progress, says why there is none, and ends a stalled sweep."""
    from ray.tune import Callback

    class Watchdog(Callback):  # type: ignore[misc]
        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            watch.progress(trial.trial_id, start=True)

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            watch.progress(trial.trial_id)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            watch.progress()
            watch.forget(trial.trial_id)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            watch.progress()
            watch.forget(trial.trial_id)

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            now = time.time()
            if watch.stalled:
                return
            if not any(t.status in UNFINISHED for t in trials):
                watch.last_progress = now  # nothing waits: nothing is late
                return
            quiet, limit = watch.quiet_for(now), watch.limit()
            if limit is not None and quiet >= limit:
                watch.stalled = explain(watch, trials)
                log.error("stalled: %s; stopping the sweep after sweep.stall_timeout_s=%.0f s (`python -m sweeps "
                          "resume` continues it once the cause is fixed)", watch.stalled, limit)
                from sweeps.execution.run import control

                control.request_stop(watch.name, "stalled")
            elif quiet >= watch.say_after() and now - watch.said_at >= SAY_EVERY_S:
                watch.said_at = now
                log.warning("waiting: %s", explain(watch, trials))

    return Watchdog()
