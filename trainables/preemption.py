"""Spot capacity inside a Train worker: a preemption notice makes the loop checkpoint at once, and the trial's
preemptions are counted across restarts.

Ray Train 2.60 polls Ray Core's drain state (``ray drain-node``, the autoscaler reclaiming a spot node, a
KubeRay pod that gets SIGTERM) and hands every worker the notice: ``ray.train.get_preemption_info()`` returns
a ``PreemptionInfo`` (which nodes and ranks, the deadline) instead of None. It is a barrier: every rank calls
it the same number of times. The controller keeps the workers running until the deadline (plus
``FailureConfig.preemption_grace_s``), then restarts the worker group on the nodes left, from the latest
checkpoint, charged to ``max_preemption_failures``, not ``max_failures``.

:class:`Watch` asks once per report point (every rank: the bundled loops ask at each epoch's report, the
script adapter at each of its report points). From the first notice on, every report carries a checkpoint, so
a restart loses at most the epoch in flight. A checkpoint saved under a notice, or by a trial preempted before,
holds a small note (:data:`NOTE_FILE`): the trial's count so far and whether it was saved under a notice; any
other checkpoint holds the loop's own files only (no note: no preemption, nothing to count). A start from a
noted checkpoint of the same trial is a preemption restart: the count goes up by one, and its first report says
from which epoch it resumed. A Ray without ``get_preemption_info`` (before 2.60) gives no notice: nothing is
counted there.

The figures reach Tune's results (and so MLflow and the report) as metrics, only once there is something to
say: ``sweeps/preemptions`` (the count), ``sweeps/resumed_epoch`` (first report after a preemption restart),
``sweeps/epoch`` (every report made under a notice or after a preemption). No Hydra, no MLflow here.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

NOTE_FILE = "preemption.json"
WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"  # Train's switch (sweeps turns it off on the embedded Ray)
PREEMPTIONS = "sweeps/preemptions"
RESUMED_EPOCH = "sweeps/resumed_epoch"
EPOCH = "sweeps/epoch"


def notice_now() -> bool:
    """Whether Ray Train says a node of this worker group is being preempted (a barrier over every rank).

    False where the installed Ray has no ``ray.train.get_preemption_info``, where Train's local mode answers
    (one process, no watcher), and where Train's watcher is switched off (the embedded local Ray: no node there
    can be preempted, and the barrier would cost a round trip per report for nothing).
    """
    if os.environ.get(WATCHER_ENV, "1").lower() in ("0", "false"):  # Train starts no watcher: no notice can come
        return False
    import ray.train

    ask = getattr(ray.train, "get_preemption_info", None)
    if ask is None:
        return False
    try:
        return ask() is not None
    except (RuntimeError, DeprecationWarning) as exc:  # not a Train worker (a Tune session, a unit test)
        log.debug("no preemption notice to ask for here (%s)", exc)
        return False


def read_note(folder: str | None) -> dict[str, Any]:
    """The note a checkpoint folder holds (an empty dict for none, or for a checkpoint written elsewhere)."""
    if not folder:
        return {}
    try:
        with open(os.path.join(folder, NOTE_FILE)) as f:
            note: dict[str, Any] = json.load(f)
            return note
    except (OSError, ValueError):
        return {}


@dataclass
class Watch:
    """One Train worker's count of its trial's preemptions, and whether a notice is in force.

    Example::

        watch = preemption.Watch.start(checkpoint_folder, config.get("_trial_id"))
        for epoch in ...:
            save = watch.due() or epoch % every == 0      # every rank: a barrier
            ...
            if folder: watch.write(folder, epoch)         # rank 0, into the checkpoint
            ray.train.report({**metrics, **watch.metrics(epoch)}, checkpoint=...)
    """

    trial_id: str = ""
    preemptions: int = 0
    resumed_epoch: int | None = None  # set until the first report after a preemption restart
    notice: bool = False

    @classmethod
    def start(cls, folder: str | None, trial_id: Any) -> Watch:
        """The watch of a start from the checkpoint in ``folder`` (None: a fresh start).

        A checkpoint of another trial (a PBT donor's) carries that trial's history, not this one's: the count
        starts at 0, and a donor's notice is no preemption of this trial.
        """
        trial = str(trial_id or "")
        note = read_note(folder)
        if not note or str(note.get("trial", "")) != trial:
            return cls(trial)
        watch = cls(trial, preemptions=int(note.get("preemptions", 0)))
        if note.get("notice"):
            watch.preemptions += 1
            watch.resumed_epoch = int(note.get("epoch", 0))
            log.warning("trial %s: resumed at epoch %s after a node preemption (preemption %d)", trial,
                        watch.resumed_epoch, watch.preemptions)
        return watch

    def due(self) -> bool:
        """Whether this report point must carry a checkpoint because a preemption notice came (now or at an
        earlier point of this start). Every rank calls it at the same points: it asks Ray (a barrier) until the
        first notice, and no more after (every rank has the same answer then, so they stop together)."""
        if not self.notice and notice_now():
            self.notice = True
            log.warning("trial %s: preemption notice; checkpointing at every report until the restart",
                        self.trial_id)
        return self.notice

    def write(self, folder: str, epoch: int) -> None:
        """Put the note into a checkpoint folder (rank 0, with the loop's own files), once there is something to
        note: a notice in force or a preemption counted. A trial never preempted keeps its checkpoints as its loop
        wrote them (a start from a checkpoint without a note counts from 0, as it would from this note)."""
        if not (self.notice or self.preemptions):
            return
        note = {"trial": self.trial_id, "preemptions": self.preemptions, "notice": self.notice, "epoch": int(epoch)}
        with open(os.path.join(folder, NOTE_FILE), "w") as f:
            json.dump(note, f)

    def metrics(self, epoch: int) -> dict[str, int]:
        """What this report adds to the loop's metrics: nothing until a notice or a preemption."""
        out: dict[str, int] = {}
        if self.preemptions:
            out[PREEMPTIONS] = self.preemptions
        if self.resumed_epoch is not None:
            out[RESUMED_EPOCH] = self.resumed_epoch
            self.resumed_epoch = None
        if self.notice or self.preemptions:
            out[EPOCH] = int(epoch)
        return out
