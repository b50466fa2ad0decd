"""A damaged sweep state never ends ``resume`` in a traceback: the last good copy comes back, or one line says why not.

A driver killed mid-write or a full disk can leave ``tuner.pkl``, the newest ``experiment_state-*.json``, the
searcher's or the callbacks' (the scheduler's) state truncated; ``Tuner.restore`` then dies inside Tune. So the
sweep keeps good copies in ``<experiment>/sweeps-good/`` (``tuner.pkl`` when the Tuner is made, the experiment
state at most every :data:`EVERY_S` seconds of experiment checkpoints), and before a resume each file is read:

- a damaged ``tuner.pkl`` is replaced by its copy;
- a damaged experiment state by the last good copy (the results since then are lost: the trials restart from
  the checkpoints it names, and the resume says how many seconds that was), else by an earlier session's file;
- a damaged searcher or scheduler state is moved aside: the searcher, or the scheduler, starts afresh, said so;
- with no good copy of ``tuner.pkl`` or of any experiment state, BadInput names the file and the ways out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from sweeps import uris
from sweeps.errors import BadInput

log = logging.getLogger(__name__)
GOOD = "sweeps-good"
EVERY_S = 60.0
TUNER = "tuner.pkl"
STATE_PREFIX = "experiment_state-"


def good_dir(experiment_dir: str) -> str:
    return uris.join(experiment_dir, GOOD)


def _newest(experiment_dir: str, prefix: str) -> list[str]:
    try:
        return sorted((n for n in uris.listdir(experiment_dir) if n.startswith(prefix)), reverse=True)
    except (FileNotFoundError, OSError):
        return []


def _loads_pickle(data: bytes) -> None:
    import ray.cloudpickle as cloudpickle

    cloudpickle.loads(data)


def _readable(location: str, parse: Callable[[bytes], Any]) -> bool:
    try:
        parse(uris.read_bytes(location))
    except Exception:  # truncated, corrupt, unreadable: not a good copy
        return False
    return True


def keep_tuner(experiment_dir: str) -> None:
    """After the Tuner wrote ``tuner.pkl``: a copy to come back to."""
    source = uris.join(experiment_dir, TUNER)
    if uris.exists(source):
        uris.write_bytes(uris.join(good_dir(experiment_dir), TUNER), uris.read_bytes(source))


def keep_state(experiment_dir: str) -> None:
    """During the run (each experiment checkpoint, at most every ``EVERY_S``): the experiment state now in
    storage, when it reads whole, as the last good copy."""
    for name in _newest(experiment_dir, STATE_PREFIX)[:1]:
        data = uris.read_bytes(uris.join(experiment_dir, name))
        if _readable_json(data):
            uris.write_bytes(uris.join(good_dir(experiment_dir), name), data)


def _readable_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def repair(experiment_dir: str) -> list[str]:
    """Before ``Tuner.restore``: put back or move aside what is damaged; what changed, one line each."""
    notes = _repair_tuner(experiment_dir) + _repair_state(experiment_dir)
    for prefix, what in (("searcher-state-", "the searcher starts afresh (its suggestions forget the trials so far)"),
                         ("callback-states-", "the scheduler starts with its state empty")):
        for name in _newest(experiment_dir, prefix)[:1]:
            location = uris.join(experiment_dir, name)
            if not _readable(location, _loads_pickle):
                _aside(location)
                notes.append(f"{name} was damaged and is set aside ({name}.damaged): {what}")
    for note in notes:
        log.warning("resume: %s", note)
    return notes


def _aside(location: str) -> None:
    uris.write_bytes(location + ".damaged", uris.read_bytes(location))
    uris.delete_file(location)


def _repair_tuner(experiment_dir: str) -> list[str]:
    location, copy = uris.join(experiment_dir, TUNER), uris.join(good_dir(experiment_dir), TUNER)
    if _readable(location, _loads_pickle):
        return []
    if not uris.exists(copy) or not _readable(copy, _loads_pickle):
        if not uris.exists(location):
            return []  # never written (the sweep stopped before Tune saved anything): the caller says so
        raise BadInput(f"SWEEP_ID: {location} is damaged and no good copy was kept; the trials so far are in "
                       f"storage: `python -m sweeps sync SWEEP_ID` records them in MLflow, and `python -m sweeps "
                       f"extend SWEEP_ID --more-trials N` (once synced) or a new run continues the search")
    if uris.exists(location):
        _aside(location)
    uris.write_bytes(location, uris.read_bytes(copy))
    return [f"{TUNER} was damaged: put back from the copy kept when the sweep started"]


def _repair_state(experiment_dir: str) -> list[str]:
    names = _newest(experiment_dir, STATE_PREFIX)
    if not names or _readable(uris.join(experiment_dir, names[0]), json.loads):
        return []
    damaged = uris.join(experiment_dir, names[0])
    written = uris.mtime(damaged)
    _aside(damaged)
    good = uris.join(good_dir(experiment_dir), names[0])
    if uris.exists(good) and _readable(good, json.loads):
        uris.write_bytes(damaged, uris.read_bytes(good))
        lost = _age(written, uris.mtime(good))
        return [f"{names[0]} was damaged: the last good copy is back; the results of the last {lost} are lost "
                f"and the trials restart from the checkpoints it names"]
    older = [n for n in names[1:] if _readable(uris.join(experiment_dir, n), json.loads)]
    if older:
        return [f"{names[0]} was damaged and is set aside: the resume starts from {older[0]} (an earlier run's "
                f"state; the trials restart from the checkpoints it names)"]
    raise BadInput(f"SWEEP_ID: {damaged} is damaged and no good copy was kept; the trials so far are in storage: "
                   f"`python -m sweeps sync SWEEP_ID` records them in MLflow, then `python -m sweeps extend SWEEP_ID "
                   f"--more-trials N` continues the search")


def _age(newer: float | None, kept: float | None) -> str:
    """How much newer the damaged state was than the good copy, in words."""
    if newer is None or kept is None:
        return "moments"
    return f"{max(newer - kept, 0):.0f} s"
