"""Which checkpoints outlive whom: PBT donors pinned for their recipients, and the sweep's leftovers removed.

A PBT exploit hands the recipient the donor's latest checkpoint, which lives in the donor's trial folder
under the donor's ``checkpoint.num_to_keep``: the donor trains on, and Tune may delete that checkpoint before
the recipient has started and restored it (seconds later, many donor epochs on short ones). So the driver
pins it: right after the exploit (in the same driver step, before the donor can report again) the
checkpoint is copied into the recipient's folder as ``sweeps-donor-<hash>`` (hard links on local disk,
server-side copies on one object store), and the recipient seeds its Train run from the pin. A trial keeps
at most one pin: the one for the checkpoint Tune would hand it now. At the end of the experiment every
other pin and the whole ``<sweep>-train`` folder (Train's per-start run folders, including those of starts
that were killed) are deleted. docs/ray.md, "The Train -> Tune bridge".
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from typing import Any

from sweeps import uris
from sweeps.execution.bridge import copy_checkpoint

log = logging.getLogger(__name__)

PIN_PREFIX = "sweeps-donor-"


def pin_name(checkpoint_path: str) -> str:
    return PIN_PREFIX + hashlib.sha1(checkpoint_path.encode()).hexdigest()[:16]


def inside(path: str, folder: str) -> bool:
    return path.rstrip("/").startswith(folder.rstrip("/") + "/")


def _exists(fs: Any, path: str) -> bool:
    import pyarrow.fs as pafs

    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def drop_pins(fs: Any, trial_dir: str, keep: str | None) -> None:
    """Delete the pins in a trial folder, but ``keep`` (a pin name)."""
    import pyarrow.fs as pafs

    try:
        infos = fs.get_file_info(pafs.FileSelector(trial_dir, allow_not_found=True))
    except OSError:
        return
    for info in infos:
        name = posixpath.basename(info.path.rstrip("/"))
        if name.startswith(PIN_PREFIX) and name != keep:
            try:
                fs.delete_dir(info.path)
            except OSError as exc:
                log.warning("could not delete the stale PBT pin %s (%s)", info.path, exc)


def seed_for(start: Any, storage: Any) -> Any:
    """The checkpoint to seed a trial's start with: ``start``, or its pin when it is another trial's.

    ``storage`` is the trial's Tune storage context (``trial_fs_path``, ``storage_filesystem``). Pins of
    checkpoints Tune no longer hands this trial are deleted.
    """
    trial_dir, fs = storage.trial_fs_path, storage.storage_filesystem
    foreign = start is not None and not inside(start.path, trial_dir)
    keep = pin_name(start.path) if foreign else None
    drop_pins(fs, trial_dir, keep)
    if not foreign:
        return start
    pinned = posixpath.join(trial_dir, str(keep))
    if _exists(fs, pinned):
        import ray.train

        return ray.train.Checkpoint(pinned, fs)
    log.warning("no pinned copy of the donor checkpoint %s: restoring from the original", start.path)
    return start


def _pin(trial: Any) -> None:
    ckpt = trial.checkpoint
    if ckpt is None or not trial.path or inside(ckpt.path, trial.path):
        return
    fs = trial.storage.storage_filesystem
    dest = posixpath.join(trial.path, pin_name(ckpt.path))
    if _exists(fs, dest):
        return
    copy_checkpoint(ckpt.path, ckpt.filesystem, dest, fs)
    log.debug("pinned %s's donor checkpoint %s as %s", trial.trial_id, ckpt.path, dest)


def _sweep(trials: list[Any], train_dir: str) -> None:
    try:
        uris.delete_dir(train_dir)
    except Exception as exc:  # noqa: BLE001 - best effort: a Train run still being torn down
        log.warning("could not delete the Train run folders %s (%s)", train_dir, exc)
    for t in trials:
        ckpt = t.checkpoint
        if not t.path:
            continue
        # A finished trial restores from nothing (PBT may still have exploited into it at its very end).
        needed = ckpt is not None and t.status != "TERMINATED" and not inside(ckpt.path, t.path)
        keep = pin_name(ckpt.path) if needed else None
        drop_pins(t.storage.storage_filesystem, t.path, keep)


def callbacks(train_dir: str) -> list[Any]:
    """Tune callbacks: pin PBT donors' checkpoints; at the experiment's end, delete what no trial needs."""
    from ray.tune import Callback

    class DonorPins(Callback):  # type: ignore[misc]
        """Right after a result (and so right after any exploit it caused), pin foreign checkpoints.

        PBT exploits into the trial that reported (asynchronous mode) or into paused trials (synchronous).
        """

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            for t in trials:
                if t is trial or t.status == "PAUSED":
                    try:
                        _pin(t)
                    except Exception as exc:  # noqa: BLE001 - the recipient falls back to the original
                        log.warning("could not pin the donor checkpoint of trial %s (%s)", t.trial_id, exc)

    class Sweeper(Callback):  # type: ignore[misc]
        """Every trial start has ended: Train's run folders and unneeded pins go."""

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            _sweep(trials, train_dir)

    return [DonorPins(), Sweeper()]
