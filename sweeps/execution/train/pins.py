"""Pinned donor checkpoints: the copy of another trial's checkpoint a PBT exploit hands a trial, kept in the
trial's own folder (``sweeps-donor-<hash>``) so the donor's retention cannot delete it before the trial's start
reads it. The trial's start (:mod:`sweeps.execution.train.trial`) seeds from the pin; the checkpoint keeper
(:mod:`sweeps.execution.tuning.keeper`) makes pins and drops old ones."""

from __future__ import annotations

import hashlib
import logging
import posixpath
from typing import Any

from sweeps import uris

log = logging.getLogger(__name__)

PIN_PREFIX = "sweeps-donor-"


def pin_name(checkpoint_path: str) -> str:
    return PIN_PREFIX + hashlib.sha1(checkpoint_path.encode()).hexdigest()[:16]


def inside(path: str, folder: str) -> bool:
    return path.rstrip("/").startswith(folder.rstrip("/") + "/")


def exists(fs: Any, path: str) -> bool:
    import pyarrow.fs as pafs

    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def subfolders(fs: Any, folder: str, prefix: str) -> list[str]:
    """The sub-folders of ``folder`` whose names start with ``prefix``, sorted."""
    import pyarrow.fs as pafs

    try:
        infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError:
        return []
    names = (posixpath.basename(i.path.rstrip("/")) for i in infos if i.type == pafs.FileType.Directory)
    return sorted(n for n in names if n.startswith(prefix))


def drop_pins(fs: Any, trial_dir: str, keep: str | None, prefix: str = PIN_PREFIX) -> None:
    """Delete the pins (or the kept copies, with ``KEEP_PREFIX``) in a trial folder, but ``keep`` (a name)."""
    for name in subfolders(fs, trial_dir, prefix):
        if name != keep:
            try:
                fs.delete_dir(posixpath.join(trial_dir, name))
            except OSError as exc:
                log.warning("could not delete %s in %s (%s)", name, trial_dir, exc)


def seed_for(start: Any, trial_uri: str) -> Any:
    """The checkpoint to seed a trial's start with: ``start``, or its pin when it is another trial's.

    ``trial_uri`` is the trial's folder in storage. Pins of checkpoints Tune no longer hands this trial are
    deleted.
    """
    fs, trial_dir = uris.filesystem(trial_uri)
    foreign = start is not None and not inside(start.path, trial_dir)
    keep = pin_name(start.path) if foreign else None
    drop_pins(fs, trial_dir, keep)
    if not foreign:
        return start
    pinned = posixpath.join(trial_dir, str(keep))
    if exists(fs, pinned):
        import ray.train

        return ray.train.Checkpoint(pinned, fs)
    log.warning("no pinned copy of the donor checkpoint %s: restoring from the original", start.path)
    return start
