"""Which checkpoints outlive whom: PBT donors pinned for their recipients, and the sweep's leftovers removed.

A PBT exploit hands the recipient the donor's latest checkpoint, which lives in the donor's trial folder
under the donor's ``checkpoint.num_to_keep``: the donor trains on, and Tune may delete that checkpoint before
the recipient has started and restored it (seconds later, many donor epochs on short ones). So the driver
pins it: right after the exploit (in the same driver step, before the donor can report again) the
checkpoint is copied into the recipient's folder as ``sweeps-donor-<hash>`` (hard links on local disk,
server-side copies on one object store), and the recipient seeds its Train run from the pin. A trial keeps
at most one pin: the one for the checkpoint Tune would hand it now. At the end of the experiment every
other pin and the whole ``<sweep>-train`` folder (Train's per-start run folders, including those of starts
that were killed) are deleted, and deleted again once Ray has stopped (:func:`after_ray_stopped`).
docs/ray.md, "The Train -> Tune bridge".

A trial's latest checkpoint is kept alive past Tune's retention, for ``resume``. Tune deletes a checkpoint
that falls out of the best ``num_to_keep`` the moment a better-placed one is registered, but writes the
experiment state that ``resume`` restores from (which names each trial's latest checkpoint) only every so
often: a driver killed in between leaves a state whose latest checkpoint is gone, and Tune fails that trial
("does not exist on storage anymore"). So just before Tune registers a new checkpoint, the one that was the
latest is copied to ``sweeps-keep-<name>`` in the trial folder (hard links on local disk) unless Tune is
sure to keep it (ranked as Tune ranks them: :class:`sweeps.trials.CheckpointBook`), the newest
``num_to_keep + KEEP_SPARE`` copies per trial are kept (Tune forces a state sync every ``num_to_keep``
checkpoints of a trial), and ``resume`` puts back each copy whose original is gone before it restores.
docs/ray.md, "A killed driver and Tune's checkpoint retention".
"""

from __future__ import annotations

import logging
import posixpath
from typing import Any

from sweeps import uris
from sweeps.execution.train.bridge import copy_checkpoint
from sweeps.execution.train.pins import drop_pins, exists, inside, pin_name, subfolders
from sweeps.trials import CheckpointBook

log = logging.getLogger(__name__)

KEEP_PREFIX = "sweeps-keep-"
KEEP_SPARE = 2  # kept copies beyond num_to_keep: a state sync still in flight while the trial reports on


def _pin(trial: Any, fs: Any) -> None:
    ckpt = trial.checkpoint
    if ckpt is None or not trial.path or inside(ckpt.path, trial.path):
        return
    dest = posixpath.join(trial.path, pin_name(ckpt.path))
    if exists(fs, dest):
        return
    copy_checkpoint(ckpt.path, ckpt.filesystem, dest, fs)
    log.debug("pinned %s's donor checkpoint %s as %s", trial.trial_id, ckpt.path, dest)


class KeptBook:
    """The checkpoints of each running trial that Tune may still keep, as Tune ranks them: the best
    ``num_to_keep - 1`` (one more is about to be registered), with the sweep metric alone. A checkpoint ranked
    below them never climbs back (a new one only pushes it further down), so nothing else is kept; a trial
    that has ended is forgotten."""

    def __init__(self, metric: str, mode: str, num_to_keep: int | None) -> None:
        self.metric, self.keep = metric, max((num_to_keep or 1) - 1, 0)
        self.book = CheckpointBook(metric, mode)

    def add(self, trial_id: str, checkpoint: Any, result: Any) -> None:
        value = (result or {}).get(self.metric)
        self.book.add(trial_id, checkpoint, {self.metric: value} if value is not None else {})
        top = set(self.book.ranked(trial_id)[:self.keep])
        self.book.reported[trial_id] = [row for row in self.book.reported[trial_id] if row[0] in top]

    def ranked(self, trial_id: str) -> list[str]:
        return self.book.ranked(trial_id)

    def forget(self, trial_id: str) -> None:
        self.book.forget(trial_id)

    def __len__(self) -> int:
        return sum(map(len, self.book.reported.values()))


def _surely_kept(book: CheckpointBook | KeptBook, trial: Any, path: str, num_to_keep: int) -> bool:
    """Tune keeps ``path`` when one more checkpoint is registered: it is among the best ``num_to_keep - 1`` of
    the trial's checkpoints (ranked as Tune ranks them; a checkpoint this driver did not see: not sure)."""
    uri = uris.to_uri(path, trial.checkpoint.filesystem if trial.checkpoint is not None else None)
    return num_to_keep > 1 and uri in book.ranked(trial.trial_id)[:num_to_keep - 1]


def keep_latest(trial: Any, new_path: str, num_to_keep: int, book: CheckpointBook | KeptBook, fs: Any) -> None:
    """Before Tune registers ``new_path``: copy the trial's latest checkpoint unless Tune is sure to keep it."""
    latest = trial.checkpoint
    if latest is None or not trial.path or latest.path == new_path or not inside(latest.path, trial.path):
        return
    if _surely_kept(book, trial, latest.path, num_to_keep):
        return
    dest = posixpath.join(trial.path, KEEP_PREFIX + posixpath.basename(latest.path.rstrip("/")))
    if exists(fs, dest) or not exists(fs, latest.path):
        return
    copy_checkpoint(latest.path, latest.filesystem, dest, fs)
    # Only a new copy adds one: list and prune then, not on every report (a listing is a request on S3).
    for name in subfolders(fs, trial.path, KEEP_PREFIX)[:-(num_to_keep + KEEP_SPARE)]:
        fs.delete_dir(posixpath.join(trial.path, name))  # zero-padded indices: name order is age order


def restore_kept(experiment_dir: str) -> int:
    """``resume``: put back each kept checkpoint whose original Tune deleted after its last saved state."""
    fs, root = uris.filesystem(experiment_dir)
    restored = 0
    for trial_dir in (posixpath.join(root, n) for n in subfolders(fs, root, "")):
        for name in subfolders(fs, trial_dir, KEEP_PREFIX):
            original = posixpath.join(trial_dir, name[len(KEEP_PREFIX):])
            if not exists(fs, original):
                copy_checkpoint(posixpath.join(trial_dir, name), fs, original, fs)
                log.info("put back %s, which Tune deleted after it last saved its state", original)
                restored += 1
    return restored


_swept: set[str] = set()  # Train folders deleted at an experiment's end, deleted again once Ray has stopped


def _delete_train_dir(train_dir: str) -> bool:
    try:
        uris.delete_dir(train_dir)
    except Exception as exc:  # noqa: BLE001 - best effort: a Train run still being torn down
        log.debug("could not delete the Train run folders %s yet (%s)", train_dir, exc)
        return False
    return True


def after_ray_stopped() -> None:
    """Delete what a Train process killed at the experiment's end wrote after the sweep's clean-up.

    Tune kills the trial actors just before ``on_experiment_end``; their Train controllers and workers die
    after them, asynchronously, and one of them can still be writing (a checkpoint, Train's state file) into
    the folder the clean-up just deleted. Once Ray has stopped (or this driver has left the cluster, which
    ends the job's actors), nothing writes there any more.
    """
    while _swept:
        train_dir = _swept.pop()
        try:
            left = uris.exists(train_dir)
        except Exception as exc:  # noqa: BLE001 - the storage went away: nothing more to do here
            log.debug("could not check %s (%s)", train_dir, exc)
            continue
        if left and not _delete_train_dir(train_dir):
            log.warning("could not delete the Train run folders %s: delete it by hand", train_dir)


def _sweep(trials: list[Any], train_dir: str, fs: Any) -> None:
    _delete_train_dir(train_dir)
    _swept.add(train_dir)
    for t in trials:
        ckpt = t.checkpoint
        if not t.path:
            continue
        # A finished trial restores from nothing (PBT may still have exploited into it at its very end).
        needed = ckpt is not None and t.status != "TERMINATED" and not inside(ckpt.path, t.path)
        keep = pin_name(ckpt.path) if needed else None
        drop_pins(fs, t.path, keep)
        if t.status in ("TERMINATED", "ERROR"):  # Tune's final state is saved: nothing restores these
            drop_pins(fs, t.path, None, KEEP_PREFIX)


def donor_of(trial: Any, trials: list[Any]) -> str | None:
    """The trial whose folder holds the checkpoint ``trial`` would restore from (a PBT donor), or None."""
    ckpt = trial.checkpoint
    if ckpt is None or not trial.path or inside(ckpt.path, trial.path):
        return None
    return next((t.trial_id for t in trials if t.path and inside(ckpt.path, t.path)), None)


def _filesystem_once(train_dir: str) -> Any:
    """A function that makes ``train_dir``'s filesystem once per process (a callback restored by resume makes
    its own) and returns it."""
    made: list[Any] = []

    def fs() -> Any:
        if not made:
            made.append(uris.filesystem(train_dir)[0])
        return made[0]

    return fs


def callbacks(train_dir: str, num_to_keep: int | None, metric: str, mode: str,
              on_donor: Any = None) -> list[Any]:
    """Tune callbacks: pin PBT donors' checkpoints, keep each trial's latest checkpoint alive for ``resume``;
    at the experiment's end, delete what no trial needs. ``train_dir`` is under the sweep's storage: the trial
    folders share its filesystem. ``on_donor(recipient, donor)`` hears of each PBT exploit's donor."""
    from ray.tune import Callback

    fs = _filesystem_once(train_dir)

    class DonorPins(Callback):  # type: ignore[misc]
        """After each result, pin foreign checkpoints (PBT exploits into the reporter, or paused trials)."""

        def __init__(self) -> None:
            self.told: dict[str, str] = {}  # a paused or running trial -> the donor last said

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.told.pop(trial.trial_id, None)

        on_trial_error = on_trial_complete

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            for t in trials:
                if t is trial or t.status == "PAUSED":
                    try:
                        donor = donor_of(t, trials)
                        if donor and on_donor is not None and self.told.get(t.trial_id) != donor:
                            self.told[t.trial_id] = donor
                            on_donor(t.trial_id, donor)
                        _pin(t, fs())
                    except Exception as exc:  # noqa: BLE001 - the recipient falls back to the original
                        log.warning("could not pin the donor checkpoint of trial %s (%s)", t.trial_id, exc)

    class LatestKept(Callback):  # type: ignore[misc]
        """Tune calls ``on_checkpoint`` just before it registers the checkpoint (and deletes the worst)."""

        def __init__(self) -> None:
            self.book = KeptBook(metric, mode, num_to_keep)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.book.forget(trial.trial_id)  # an ended trial restores from nothing

        on_trial_error = on_trial_complete

        def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any,
                          **info: Any) -> None:
            if num_to_keep is None:  # Tune deletes nothing
                return
            try:
                keep_latest(trial, checkpoint.path, num_to_keep, self.book, fs())
            except Exception as exc:  # noqa: BLE001 - the sweep goes on; only a kill right now could hurt
                log.warning("could not keep trial %s's latest checkpoint for resume (%s)", trial.trial_id, exc)
            self.book.add(trial.trial_id, checkpoint, trial.last_result)

    class Sweeper(Callback):  # type: ignore[misc]
        """Every trial start has ended: Train's run folders and unneeded pins go."""
        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            _sweep(trials, train_dir, fs())

    return [DonorPins(), LatestKept(), Sweeper()]
