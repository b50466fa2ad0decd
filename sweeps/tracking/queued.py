"""The sweep's tracker as Tune calls it: every hook queued for the tracker's writer thread, off Tune's loop.

:class:`sweeps.tracking.callback._Tracker` is what the hooks do, in order and synchronously; :class:`Queued` hands
each hook to :mod:`sweeps.tracking.writer` with a snapshot of the trial, and waits for the queue before the end
of the sweep or a stop drains the tracker and closes its runs.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from sweeps.tracking.callback import _Tracker
from sweeps.tracking.writer import Writer, view

log = logging.getLogger(__name__)


def make_callback(**kwargs: Any) -> Any:
    """Build the sweep's tracker as a Tune callback (Tune is imported lazily, so this module stays light)."""
    from ray.tune import Callback

    class MlflowTrackingCallback(Queued, Callback):  # type: ignore[misc]
        pass

    return MlflowTrackingCallback(**kwargs)


class Queued(_Tracker):
    """The sweep's tracker as Tune calls it: each hook is queued for the writer thread with a snapshot of the
    trial (:mod:`sweeps.tracking.writer`), so no MLflow call holds Tune's loop; the end of the sweep and a stop
    wait for the queue first. :class:`_Tracker` itself stays synchronous (what the hooks do, in order)."""

    @property
    def writer(self) -> Writer:
        if getattr(self, "_writer", None) is None:
            self._writer = Writer()
        return self._writer

    def _later(self, job: Any, *args: Any) -> None:
        self.writer.submit(functools.partial(job, self, *args))

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._later(_Tracker.on_trial_start, iteration, [], view(trial))

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self._later(_Tracker.on_trial_result, iteration, [], view(trial), dict(result))

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        self._later(_Tracker.on_checkpoint, iteration, [], view(trial), checkpoint)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._later(_Tracker.on_trial_recover, iteration, [], view(trial))

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._later(_Tracker.on_trial_complete, iteration, [], view(trial))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._later(_Tracker.on_trial_error, iteration, [], view(trial))

    def note_tags(self, trial_id: str, tags: dict[str, str]) -> None:
        self._later(_Tracker.note_tags, trial_id, dict(tags))

    def note_rung(self, trial_id: str, kind: str, where: float) -> None:
        self._later(_Tracker.note_rung, trial_id, kind, where)

    def _settle(self) -> None:
        """Wait for the queued writes (at most ``drain_s``) before this thread drains and closes the runs."""
        if not self.writer.wait(self.drain_s):
            dropped = self.writer.abandon()
            log.warning("MLflow: %d write(s) still queued after %.0f s (the store does not answer); the runs are "
                        "closed with what was written, `python -m sweeps sync SWEEP_ID` back-fills the rest",
                        dropped, self.drain_s)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self._settle()
        super().on_experiment_end(trials, **info)

    def close_open(self, status: str = "KILLED") -> None:
        self._settle()
        super().close_open(status)
