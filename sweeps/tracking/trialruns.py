"""One MLflow run per trial, even when ``create_run`` was retried.

MLflow's HTTP client retries a POST that timed out, so a slow server can hold one run per attempt while the
client sees one (or an error). The tracker looks its trial's runs up by tag after creating one and at the end
of the sweep, keeps the first and deletes the empty copies, so no duplicate is left RUNNING.
"""

from __future__ import annotations

from typing import Any

from sweeps.tracking.client import PARENT_TAG, RUN_TAG_TRIAL, find_runs


def trial_runs(c: Any, experiment_id: str, parent_run_id: str, trial_id: str) -> list[Any]:
    """The trial's runs under the sweep's parent run, oldest first."""
    found = find_runs(c, [experiment_id], f"tags.`{PARENT_TAG}` = '{parent_run_id}' and tags.`{RUN_TAG_TRIAL}` = "
                                         f"'{trial_id}'")
    return sorted(found, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def keep_one(c: Any, experiment_id: str, parent_run_id: str, trial_id: str,
             keep: str | None) -> tuple[str | None, list[str]]:
    """(the run kept: ``keep`` or the oldest, the run ids deleted); (None, []) when the trial has no run."""
    found = trial_runs(c, experiment_id, parent_run_id, trial_id)
    if not found:
        return None, []
    kept = keep if keep in {r.info.run_id for r in found} else found[0].info.run_id
    deleted = [r.info.run_id for r in found if r.info.run_id != kept]
    for run_id in deleted:
        c.delete_run(run_id)
    return kept, deleted


def copies(runs: list[Any], keep: dict[str, str]) -> list[str]:
    """Run ids to delete: for each trial with several runs, all but ``keep[trial]``, else the one that ended (the
    tracker forgets a trial once it has ended its run; a copy is never ended), else its oldest."""
    by_trial: dict[str, list[Any]] = {}
    for r in sorted(runs, key=lambda r: (r.info.status == "RUNNING", r.info.start_time or 0, r.info.run_id)):
        if RUN_TAG_TRIAL in r.data.tags:
            by_trial.setdefault(r.data.tags[RUN_TAG_TRIAL], []).append(r)
    out: list[str] = []
    for tid, group in by_trial.items():
        ids = [r.info.run_id for r in group]
        kept = keep.get(tid) if keep.get(tid) in ids else ids[0]
        out += [i for i in ids if i != kept]
    return out
