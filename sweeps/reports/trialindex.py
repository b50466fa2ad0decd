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
VERSION = 2  # 2: one layout for both files (version, key, stamp, then what is kept)


def stamp(experiment_dir: str, names: list[str]) -> list[list[Any]]:
    """The experiment's Tune state files as they are now: [name, size, modification time] each."""
    from sweeps.execution.levers.tune_files import STATE_PREFIX

    return [[name, *uris.size_and_mtime(uris.join(experiment_dir, name))]
            for name in sorted(n for n in names if n.startswith(STATE_PREFIX))]


def _kept(experiment_dir: str, file: str, names: list[str], key: dict[str, Any]) -> dict[str, Any] | None:
    """What was kept in ``file`` beside the experiment for ``key``, while the experiment's state is as it was
    then; None otherwise (none kept, another key, a newer state, a damaged file)."""
    if file not in names:
        return None
    try:
        kept = json.loads(uris.read_text(uris.join(experiment_dir, file)))
        if kept.get("version") == VERSION and kept.get("key") == key and kept.get("stamp") == stamp(experiment_dir,
                                                                                                    names):
            return dict(kept)
    except Exception as exc:  # a damaged file keeps nothing: the caller reads the long way
        log.debug("%s of %s is unreadable (%s)", file, experiment_dir, exc)
    return None


def _keep(experiment_dir: str, file: str, names: list[str], key: dict[str, Any], **payload: Any) -> None:
    """Keep ``payload`` in ``file`` beside the experiment for ``key``, stamped with its state as it is now. Never
    raises: what is kept is a shortcut, never a reason to fail."""
    try:
        data = json.dumps({"version": VERSION, "key": key, "stamp": stamp(experiment_dir, names), **payload},
                          separators=(",", ":"))
        uris.write_bytes(uris.join(experiment_dir, file), data.encode())
    except Exception as exc:  # values JSON cannot hold, storage that refuses writes: the next read goes the long way
        log.debug("could not keep %s of %s (%s)", file, experiment_dir, exc)


def read(experiment_dir: str, names: list[str], settings: dict[str, Any], make: Callable[..., Any]) -> list[Any] | None:
    """The experiment's trials from its index (each made by ``make(**fields)``), or None where it has no index, or
    one written for other settings or an older state."""
    kept = _kept(experiment_dir, INDEX, names, settings)
    try:
        return None if kept is None else [make(**_restored(t)) for t in kept["trials"]]
    except Exception as exc:  # a damaged index is no index: Tune's state is read instead
        log.debug("the trial index of %s is unreadable (%s): reading Tune's state", experiment_dir, exc)
        return None


def write(experiment_dir: str, names: list[str], settings: dict[str, Any], trials: list[dict[str, Any]]) -> None:
    """Keep ``trials`` (each a record's fields) as the experiment's index, stamped with its state as it is now."""
    _keep(experiment_dir, INDEX, names, settings, trials=trials)


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
    try:
        names = uris.listdir(last)
    except Exception as exc:  # storage that cannot be listed: MLflow is asked, nothing kept
        log.debug("could not list %s (%s)", last, exc)
        return ids_for(rec)
    kept = _kept(last, MODELS, names, key)
    if kept is not None and isinstance(kept.get("models"), dict):
        return {str(k): str(v) for k, v in kept["models"].items()}
    try:
        ids = ids_of(rec)
    except Exception as exc:  # an unreachable store, or one without LoggedModels: the report goes without
        log.debug("no model ids for %s (%s)", rec.sweep_id, exc)
        return {}
    if keep:
        _keep(last, MODELS, names, key, models=ids)
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
