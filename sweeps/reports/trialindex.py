"""A sweep's own index of one experiment's trials: one file read in place of Tune's state and each trial's files.

Reading an experiment's trials back through Tune decodes every trial's saved state (7.7 s of an 11 s report over
5,000 trials), then reads each trial's ``result.json``, lists its checkpoints and looks for its error file. The
driver reads them all once as the sweep's run ends; it keeps what it read as ``sweeps-trials.json`` in the
experiment folder, stamped with

- the experiment's Tune state files (each one's name, size and modification time), and
- the reading's settings (metric, mode, the epoch budget, whether the sweep had settled).

A later read with the same settings (``sweeps report``, ``promote``, ``confirm``, ``sync``) takes the trials from
the index while the stamp still matches. Any later write of Tune's state (a resume, a repaired state) makes it
stale, and the trials are read from Tune again; a resumed run's end writes a new index. An unreadable or damaged
index counts as none, and one that cannot be written costs nothing but the next read's time.

The trials' model ids (MLflow's LoggedModels, which a report links) are kept the same way, beside the sweep's
last experiment, once a report of a sweep that is not running asked MLflow for them (``sweeps-models.json``,
stamped with that experiment's state and the sweep's experiments and store): over thousands of trials, starting
MLflow for them was most of a report's time. Only the sweep's tracker (while it runs) and ``sweeps sync`` make
or replace a trial's model; a sync forgets the kept ids (:func:`forget_models`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from sweeps import uris

log = logging.getLogger(__name__)
INDEX = "sweeps-trials.json"
MODELS = "sweeps-models.json"
VERSION = 1


def stamp(experiment_dir: str, names: list[str]) -> list[list[Any]]:
    """The experiment's Tune state files as they are now: [name, size, modification time] each."""
    from sweeps.execution.levers.tune_files import STATE_PREFIX

    out = []
    for name in sorted(n for n in names if n.startswith(STATE_PREFIX)):
        location = uris.join(experiment_dir, name)
        out.append([name, uris.size(location), uris.mtime(location)])
    return out


def read(experiment_dir: str, names: list[str], settings: dict[str, Any], make: Callable[..., Any]) -> list[Any] | None:
    """The experiment's trials from its index (each made by ``make(**fields)``), or None where it has no index, or
    one written for other settings or an older state."""
    if INDEX not in names:
        return None
    try:
        index = json.loads(uris.read_text(uris.join(experiment_dir, INDEX)))
        if index.get("version") != VERSION or index.get("settings") != settings:
            return None
        if index.get("stamp") != stamp(experiment_dir, names):
            return None
        return [make(**_restored(t)) for t in index["trials"]]
    except Exception as exc:  # a damaged index is no index: Tune's state is read instead
        log.debug("the trial index of %s is unreadable (%s): reading Tune's state", experiment_dir, exc)
        return None


def write(experiment_dir: str, names: list[str], settings: dict[str, Any], trials: list[dict[str, Any]]) -> None:
    """Keep ``trials`` (each a record's fields) as the experiment's index, stamped with its state as it is now.
    Never raises: an index is a shortcut, never a reason to fail."""
    try:
        data = json.dumps({"version": VERSION, "settings": settings, "stamp": stamp(experiment_dir, names),
                           "trials": trials}, separators=(",", ":"))
        uris.write_bytes(uris.join(experiment_dir, INDEX), data.encode())
    except Exception as exc:  # params of a type JSON cannot hold, storage that refuses writes
        log.debug("could not write the trial index of %s (%s): the next read goes through Tune", experiment_dir,
                  exc)


def _restored(fields: dict[str, Any]) -> dict[str, Any]:
    """A record's fields as JSON gave them back: a schedule's steps as tuples again."""
    schedule = fields.get("schedule")
    if schedule is not None:
        fields["schedule"] = {k: tuple((int(step), value) for step, value in v) for k, v in schedule.items()}
    return fields


def model_ids(rec: Any, keep: bool = True) -> dict[str, str]:
    """Trial id -> model id of a stored sweep: the kept ids while they match, else MLflow's (kept when the sweep is
    not running and ``keep``); {} when the store cannot say. The driver's own report as its run ends does not keep
    them: an upload its tracker gave up waiting for may still land."""
    from sweeps.tracking.models import ids_for, ids_of

    if not rec.experiment_dirs or rec.status == "running" or not rec.mlflow_experiment_id:
        return ids_for(rec)
    last: str = rec.experiment_dirs[-1]
    key = {"sweep_id": rec.sweep_id, "experiment_dirs": list(rec.experiment_dirs), "store": rec.tracking_uri,
           "experiment": rec.mlflow_experiment_id}
    names: list[str] = []
    try:
        names = uris.listdir(last)
        kept = json.loads(uris.read_text(uris.join(last, MODELS))) if MODELS in names else {}
        if kept.get("version") == VERSION and kept.get("key") == key and kept.get("stamp") == stamp(last, names):
            return {str(k): str(v) for k, v in kept["models"].items()}
    except Exception as exc:  # damaged: asked again
        log.debug("the kept model ids of %s are unreadable (%s)", rec.sweep_id, exc)
    try:
        ids = ids_of(rec)
    except Exception as exc:  # an unreachable store, or one without LoggedModels: the report goes without
        log.debug("no model ids for %s (%s)", rec.sweep_id, exc)
        return {}
    if not keep:
        return ids
    try:
        data = {"version": VERSION, "key": key, "stamp": stamp(last, names), "models": ids}
        uris.write_bytes(uris.join(last, MODELS), json.dumps(data).encode())
    except Exception as exc:  # storage that refuses writes: the next report asks MLflow again
        log.debug("could not keep the model ids of %s (%s)", rec.sweep_id, exc)
    return ids


def forget_models(rec: Any) -> None:
    """Drop the sweep's kept model ids (a sync made or replaced models). Never raises."""
    for exp in rec.experiment_dirs[-1:]:
        try:
            if uris.exists(uris.join(exp, MODELS)):
                uris.delete_file(uris.join(exp, MODELS))
        except Exception as exc:
            log.warning("could not drop the kept model ids %s (%s): delete it by hand, or reports may miss a "
                        "model sync made", uris.join(exp, MODELS), exc)
