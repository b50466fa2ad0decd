"""A damaged sweep state never ends ``resume`` in a traceback: the last good copy comes back, or one line says why not.

A driver killed mid-write or a full disk can leave ``tuner.pkl``, the newest ``experiment_state-*.json``, the
searcher's or the callbacks' (the scheduler's) state truncated; ``Tuner.restore`` then dies inside Tune. So the
sweep keeps good copies in ``<experiment>/sweeps-good/``:

- ``tuner.pkl``, when the Tuner is made;
- the state *set*: the newest experiment state with the searcher's and the callbacks' states of the same Tune
  session (Tune writes the three together), in one file (:data:`SET`), when each of them reads whole: at most
  every :data:`EVERY_S` seconds of experiment checkpoints, and once more when the run ends.

Every kept copy is written atomically (a temporary name, then a rename, on local disk; a single put, which an
object store makes visible whole or not at all). Before a resume each file is read:

- a damaged ``tuner.pkl`` is replaced by its copy;
- any damaged part of the newest set brings the kept set back whole (the scheduler's state with the trials it
  names): when the experiment state kept is the one in the folder nothing is lost, else the resume says how
  many seconds of results are (the trials restart from the checkpoints it names);
- with no kept set: a damaged experiment state falls back to an earlier session's (its whole set), a damaged
  searcher or scheduler state is set aside (``damaged-<name>``) and that part starts afresh, said so;
- with no good copy of ``tuner.pkl`` or of any experiment state, BadInput names the file and the way out
  (``extend``, which continues the search in a new experiment).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeps import uris
from sweeps.errors import BadInput
from sweeps.execution.levers import core, tune_files
from sweeps.execution.levers.tune_files import PARTS, SEARCHER_PREFIX, STATE_PREFIX, TUNER
from sweeps.live import write_atomic

log = logging.getLogger(__name__)
GOOD = "sweeps-good"
EVERY_S = 60.0
SET = "state-set.pkl"
ASIDE = "damaged-"  # a set-aside file's prefix: neither Tune nor the reports take it for a state file


def good_dir(experiment_dir: str) -> str:
    return uris.join(experiment_dir, GOOD)


def _names(experiment_dir: str) -> list[str]:
    try:
        return uris.listdir(experiment_dir)
    except (FileNotFoundError, OSError):
        return []


def newest(experiment_dir: str, prefix: str) -> list[str]:
    """The folder's files of one state part (``experiment_state-``...), newest first, as Tune picks them."""
    suffix = dict(PARTS)[prefix]
    return sorted((n for n in _names(experiment_dir) if n.startswith(prefix) and n.endswith(suffix)), reverse=True)


def session_of(name: str) -> str:
    """The Tune session a state file belongs to (its name between the part's prefix and suffix)."""
    for prefix, suffix in PARTS:
        if name.startswith(prefix) and name.endswith(suffix):
            return name[len(prefix):-len(suffix)]
    return ""


def _loads_pickle(data: bytes) -> None:
    import ray.cloudpickle as cloudpickle

    cloudpickle.loads(data)


def _parser(name: str) -> Callable[[bytes], Any]:
    return json.loads if name.endswith(".json") else _loads_pickle


def _parses(name: str, data: bytes) -> bool:
    try:
        _parser(name)(data)
    except Exception:  # truncated, corrupt: not a good copy
        return False
    return True


def _readable(location: str, parse: Callable[[bytes], Any] | None = None) -> bool:
    try:
        data = uris.read_bytes(location)
    except (FileNotFoundError, OSError):
        return False
    if parse is None:
        return _parses(uris.basename(location), data)
    try:
        parse(data)
    except Exception:  # truncated, corrupt, unreadable: not a good copy
        return False
    return True


def keep_tuner(experiment_dir: str) -> None:
    """After the Tuner wrote ``tuner.pkl``: a copy to come back to (where the ``tune_files`` lever applies)."""
    if not core.applies(tune_files.LEVER):
        return
    source = uris.join(experiment_dir, TUNER)
    if uris.exists(source):
        write_atomic(uris.join(good_dir(experiment_dir), TUNER), uris.read_bytes(source))


@dataclass(frozen=True)
class KeptSet:
    """The state set kept last: file name -> bytes, and when its experiment state was written."""

    files: dict[str, bytes]
    written: float | None

    @property
    def state_name(self) -> str | None:
        return next((n for n in self.files if n.startswith(STATE_PREFIX)), None)


def keep_state(experiment_dir: str) -> bool:
    """The newest experiment state in storage with the same session's searcher and callback states, when each
    reads whole, as the last good set (one file, written atomically); whether it kept one."""
    if not core.applies(tune_files.LEVER):
        return False
    names = newest(experiment_dir, STATE_PREFIX)
    if not names:
        return False
    session = session_of(names[0])
    files: dict[str, bytes] = {}
    for prefix, suffix in PARTS:
        name = f"{prefix}{session}{suffix}"
        location = uris.join(experiment_dir, name)
        if prefix != STATE_PREFIX and not uris.exists(location):
            continue  # a run whose searcher or callbacks keep no state
        data = uris.read_bytes(location)
        if not _parses(name, data):
            return False
        files[name] = data
    written = uris.mtime(uris.join(experiment_dir, names[0]))
    write_atomic(uris.join(good_dir(experiment_dir), SET),
                 pickle.dumps({"files": files, "written": written, "kept_at": time.time()}))
    return True


def keep_final(experiment_dir: str) -> None:
    """When ``fit`` returned, Tune has saved its final state: that set is kept, so a damaged state found later (a
    full disk, a copy cut short) comes back with nothing lost. Never raises."""
    try:
        keep_state(experiment_dir)
    except Exception as exc:  # a copy is a safety net, never a reason to fail the close
        log.warning("could not keep a copy of the final state of %s (%s): a damaged state found later has no "
                    "good copy to come back to", experiment_dir, exc)


def kept_set(experiment_dir: str) -> KeptSet | None:
    """The last good set kept for the experiment, or None (none kept, or the kept file unreadable)."""
    location = uris.join(good_dir(experiment_dir), SET)
    try:
        found = pickle.loads(uris.read_bytes(location))
        return KeptSet(dict(found["files"]), found.get("written"))
    except (FileNotFoundError, OSError):
        return None
    except Exception as exc:  # a damaged kept set is no kept set
        log.warning("the kept state set %s is unreadable (%s)", location, exc)
        return None


def unrestorable(experiment_dir: str) -> str | None:
    """Why Tune cannot restore the experiment even after :func:`repair`, or None when it can."""
    tuner, copy = uris.join(experiment_dir, TUNER), uris.join(good_dir(experiment_dir), TUNER)
    if not _readable(tuner, _loads_pickle) and not _readable(copy, _loads_pickle):
        return f"{tuner} is {'damaged' if uris.exists(tuner) else 'missing'} and no good copy was kept"
    states = newest(experiment_dir, STATE_PREFIX)
    if not states:
        return f"Tune saved no experiment state in {experiment_dir} (the driver died before its first snapshot)"
    if _readable(uris.join(experiment_dir, states[0]), json.loads):
        return None
    kept = kept_set(experiment_dir)
    if kept is not None and kept.state_name == states[0]:
        return None
    if any(_readable(uris.join(experiment_dir, n), json.loads) for n in states[1:]):
        return None
    return f"{uris.join(experiment_dir, states[0])} is damaged and no good copy was kept"


def way_out(sweep_id: str, why: str) -> str:
    """The one line a sweep whose Tune state cannot be restored ends with."""
    return (f"SWEEP_ID: {why}; the trials so far stay in storage and MLflow, and `python -m sweeps extend "
            f"{sweep_id} --more-trials N` continues the search in a new experiment (with the searcher's and the "
            f"scheduler's state where they read whole)")


def repair(experiment_dir: str, sweep_id: str) -> list[str]:
    """Before ``Tuner.restore``: put back or set aside what is damaged; what changed, one line each.

    Raises:
        BadInput: ``tuner.pkl`` or the experiment state is damaged and no good copy was kept (names the way out).
    """
    if not core.applies(tune_files.LEVER):
        return []  # Tune's state as Tune left it: a damaged one fails in Tune's restore, said by resume
    why = unrestorable(experiment_dir)
    if why is not None and uris.exists(uris.join(experiment_dir, TUNER)):
        raise BadInput(way_out(sweep_id, why))
    notes = _repair_tuner(experiment_dir) + _repair_set(experiment_dir)
    for note in notes:
        log.warning("resume: %s", note)
    return notes


def _aside(location: str) -> None:
    folder, name = location.rsplit("/", 1)
    write_atomic(f"{folder}/{ASIDE}{name}", uris.read_bytes(location))
    uris.delete_file(location)


def set_aside(experiment_dir: str) -> list[str]:
    """``extend`` of a sweep whose last experiment cannot be restored: its damaged state files go aside, so that
    reports read the experiments that can be read. The names set aside."""
    out = []
    for name in [TUNER, *(n for prefix, _ in PARTS for n in newest(experiment_dir, prefix)[:1])]:
        location = uris.join(experiment_dir, name)
        if uris.exists(location) and not _readable(location, _loads_pickle if name == TUNER else None):
            _aside(location)
            out.append(name)
    return out


def _repair_tuner(experiment_dir: str) -> list[str]:
    location, copy = uris.join(experiment_dir, TUNER), uris.join(good_dir(experiment_dir), TUNER)
    if _readable(location, _loads_pickle) or not uris.exists(copy):
        return []  # whole, or never written (the sweep stopped before Tune saved anything): the caller says so
    if uris.exists(location):
        _aside(location)
    write_atomic(location, uris.read_bytes(copy))
    return [f"{TUNER} was damaged: put back from the copy kept when the sweep started"]


def _repair_set(experiment_dir: str) -> list[str]:
    current = {prefix: names[0] for prefix, _ in PARTS if (names := newest(experiment_dir, prefix))}
    damaged = [n for n in current.values() if not _readable(uris.join(experiment_dir, n))]
    if not damaged:
        return []
    kept = kept_set(experiment_dir)
    state = current.get(STATE_PREFIX)
    if kept is not None and state is not None and kept.state_name == state:
        return [_put_back(experiment_dir, kept, damaged, state)]
    if state in damaged:
        return [_older_session(experiment_dir, state)]
    notes = []
    for name in damaged:  # a searcher or scheduler state alone, with no kept set: that part starts afresh
        prefix = next(p for p, _ in PARTS if name.startswith(p))
        for stale in newest(experiment_dir, prefix):  # Tune would take an earlier run's file for the newest
            _aside(uris.join(experiment_dir, stale))
        what = ("the searcher starts afresh (its suggestions forget the trials so far)" if prefix == SEARCHER_PREFIX
                else "the scheduler starts with its state empty")
        notes.append(f"{name} was damaged and is set aside ({ASIDE}{name}), and no good copy was kept: {what}")
    return notes


def _put_back(experiment_dir: str, kept: KeptSet, damaged: list[str], state: str) -> str:
    location = uris.join(experiment_dir, state)
    same = state not in damaged and uris.read_bytes(location) == kept.files[state]
    written = uris.mtime(location)
    for name in damaged:
        _aside(uris.join(experiment_dir, name))  # kept as found, for whoever wants to look
    for name, data in kept.files.items():
        if not same or name in damaged:
            write_atomic(uris.join(experiment_dir, name), data)
    if same:
        return (f"{', '.join(damaged)} was damaged: put back from the copy kept with the experiment state it "
                f"belongs to (nothing is lost)")
    return (f"{', '.join(damaged)} was damaged: the last good copies of the experiment state and the searcher's and "
            f"scheduler's states (kept together) are back; the results of the last {_age(written, kept.written)} "
            f"are lost and the trials restart from the checkpoints it names")


def _older_session(experiment_dir: str, state: str) -> str:
    """The damaged newest session's files go aside; the resume starts from an earlier session's whole set."""
    session = session_of(state)
    for prefix, suffix in PARTS:
        name = f"{prefix}{session}{suffix}"
        if uris.exists(uris.join(experiment_dir, name)):
            _aside(uris.join(experiment_dir, name))
    older = next(n for n in newest(experiment_dir, STATE_PREFIX) if _readable(uris.join(experiment_dir, n)))
    return (f"{state} was damaged and is set aside with its session's searcher and scheduler states: the resume "
            f"starts from {older} (an earlier run's state; the trials restart from the checkpoints it names)")


def unfinished_in(records: list[Any], experiment_dir: str) -> int:
    """Unfinished trials (report records) of one experiment of the sweep: an earlier experiment that could not be
    restored (extended past, its state damaged) keeps its unfinished trials, which do not make a later run
    interrupted."""
    here = uris.normalize(experiment_dir).rstrip("/") + "/"
    return sum(1 for r in records if r.status not in ("TERMINATED", "ERROR")
               and (not r.path or uris.normalize(r.path).startswith(here)))


def _age(newer: float | None, kept: float | None) -> str:
    """How much newer the damaged state was than the good copy, in words."""
    if newer is None or kept is None:
        return "moments"
    return f"{max(newer - kept, 0):.0f} s"
