"""How a trial's MLflow run ends: its last metrics, error, best checkpoint, tags and final status, retried
until MLflow takes them (a mixin of the tracker, :mod:`sweeps.tracking.callback`).

A trial's model is its own affair: an error writing it (a checkpoint that cannot be read, a value the store
refuses) is said for that trial, tagged ``sweeps.model_error`` on its run, and the run still ends; only a store
that does not answer at all holds the endings back for a retry. Once a trial's run has ended, the tracker
forgets the trial (:meth:`Endings.forget`)."""

from __future__ import annotations

import heapq
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sweeps import uris
from sweeps.config import redaction
from sweeps.tracking.bestbook import Kept
from sweeps.tracking.client import set_tags, tag_items
from sweeps.tracking.uploads import Ending, Uploads
from sweeps.trials import error_text, trial_location

log = logging.getLogger(__name__)


class Endings:
    """The tracker's endings; the tracker gives it ``client``, ``timer``, ``runs``, ``opened``, ``buffers``,
    ``finals``, ``book``, ``dataset``, ``flush`` and ``_run_for``."""

    client: Any
    timer: Any
    runs: dict[str, str]
    opened: set[str]
    buffers: dict[str, list[Any]]
    finals: dict[str, tuple[Any, str, dict[str, str], str | None, Kept | None]]
    uri: str
    experiment_id: str
    sweep_id: str
    book: Any
    epochs: int | None
    secrets: set[str]
    log_checkpoints: bool
    drain_s: float
    storage_fs: Any
    dataset: tuple[str, str] | None
    confirm: bool
    noted: dict[str, dict[str, str]]
    attempted: set[str]
    params_due: dict[str, list[Any]]
    tags_due: dict[str, dict[str, str]]
    rungs: dict[str, dict[str, int]]
    steps: dict[str, int]
    created: set[str]
    max_models: int
    modelled: list[float]
    metric: str
    mode: str

    def flush(self, force: bool = False) -> bool:
        raise NotImplementedError

    def _run_for(self, trial: Any) -> str:
        raise NotImplementedError

    def _send(self, tid: str, run_id: str, tags: list[Any] | None = None) -> None:
        raise NotImplementedError

    def dedupe(self) -> None:
        raise NotImplementedError

    def _safe(self, fn: Any) -> None:
        try:
            with self.timer:
                fn()
        except Exception as exc:
            log.warning("MLflow call failed: %s", exc)

    def _finish(self, trial: Any, status: str) -> None:
        """Queue the trial's final writes (metrics, error, best checkpoint, tags, status) and try them now.

        If MLflow is unreachable they stay queued: every later flush retries, and :meth:`drain` at the end
        of the sweep waits for them, so a server that is down for a while loses nothing.
        """
        last = trial.last_result or {}
        done = last.get("training_iteration")  # Tune's count: a loop's own `epoch` may start at 0
        budget = (trial.config or {}).get("epochs", self.epochs)
        early = bool(status == "FINISHED" and budget and isinstance(done, int | float) and done < budget)
        tags = {"status": "ERROR" if status == "FAILED" else "TERMINATED", "early_stopped": str(early).lower(),
                "retries": str(trial.num_failures), "trial_dir": trial_location(trial, self.storage_fs) or ""}
        error = None
        if status == "FAILED":
            error = redaction.scrub(error_text(trial, self.storage_fs), self.secrets)
        best = self.book.best(trial.trial_id)  # ranked as Tune keeps them: the checkpoint promotion registers too
        if best is not None:
            tags["best_checkpoint"] = best.uri
            tags["best_checkpoint_iteration"] = str(best.result.get("training_iteration", ""))
            if best.donor:
                tags["sweeps.donor"] = best.donor  # PBT: the trial the scoring checkpoint descends from
        tags.update(self.noted.pop(trial.trial_id, {}))
        if best is not None and self.log_checkpoints and not self._earns_model(best):
            tags["sweeps.model_skipped"] = (f"not among the sweep's best {self.max_models} when it ended "
                                            f"(tracking.max_models); `python -m sweeps sync` keeps it")
            best = None
        self.finals[trial.trial_id] = (trial, status, tags, error, best)
        self.flush(force=True)

    def _try_finals(self) -> bool:
        for tid, (trial, status, tags, error, ckpt) in list(self.finals.items()):
            try:
                run_id = self._run_for(trial)
                with self.timer:
                    if error is not None:
                        self._log_error(run_id, error)
                if ckpt and self.log_checkpoints:  # the upload leaves Tune's loop (sweeps.tracking.uploads)
                    self._send(tid, run_id)  # metrics first: a FINISHED run must already hold its history
                    self.uploads.submit(self._ending(trial, run_id, status, tags, ckpt, new=tid in self.created))
                else:  # its last metrics, params and final tags in one call, then its status
                    self._send(tid, run_id, tag_items(tags))
                    with self.timer:
                        self.client.set_terminated(run_id, status=status)
                    self.opened.discard(run_id)
                del self.finals[tid]
                self.forget(tid)
            except Exception as exc:
                log.warning("MLflow: could not finalize the run of %s yet (%s); will retry", trial, exc)
                return False
        return True

    def _earns_model(self, best: Kept) -> bool:
        """Whether the trial's best checkpoint becomes a model: always with ``max_models`` 0, else when its value is
        among the best ``max_models`` of the trials that got one so far (a trial the report ranks among the best N
        at the end was among them when it ended, so the best, and every trial ``promote --rank`` may name up to N,
        have their model; a sweep of thousands of trials does not write thousands of models)."""
        if not self.max_models:
            return True
        value = best.result.get(self.metric)
        if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
            return len(self.modelled) < self.max_models  # no figure to rank by: while there is room
        key = float(value) if self.mode == "max" else -float(value)
        if len(self.modelled) < self.max_models:
            heapq.heappush(self.modelled, key)
            return True
        if key > self.modelled[0]:
            heapq.heapreplace(self.modelled, key)
            return True
        return False

    def _end_run(self, run_id: str, status: str, tags: dict[str, str]) -> None:
        set_tags(self.client, run_id, tags)
        self.client.set_terminated(run_id, status=status)
        self.opened.discard(run_id)

    @property
    def uploads(self) -> Uploads:
        if getattr(self, "_uploads", None) is None:
            self._uploads = Uploads()
        return self._uploads

    def _ending(self, trial: Any, run_id: str, status: str, tags: dict[str, str], best: Kept,
                new: bool = False) -> Ending:
        """The run's ending with its model, written by the uploads' thread; cut short: without it, said.
        ``new``: this tracker created the trial's run, so no model of the trial exists yet (a live sweep has no
        other writer of its models: ``sync`` refuses it); a retried attempt looks again."""
        first = [new]

        def write() -> None:
            new_now, first[0] = first[0], False
            with self.timer:
                self._keep_model(trial, run_id, status, tags, best, new=new_now)
                self._end_run(run_id, status, tags)

        def cut_short() -> None:
            why = (f"the sweep ended before the upload of the best checkpoint finished; `python -m sweeps sync "
                   f"{self.sweep_id}` keeps it")
            log.warning("trial %s: %s", trial.trial_id, why)
            with self.timer:
                self._end_run(run_id, status, {**tags, "sweeps.model_error": why[:500]})

        return Ending(run_id, write, cut_short)

    def forget(self, trial_id: str) -> None:
        """Drop what the tracker held for a trial whose run has ended (its run id, buffer, best checkpoint)."""
        self.runs.pop(trial_id, None)
        self.buffers.pop(trial_id, None)
        self.noted.pop(trial_id, None)
        self.attempted.discard(trial_id)
        self.params_due.pop(trial_id, None)
        self.tags_due.pop(trial_id, None)
        self.rungs.pop(trial_id, None)
        self.steps.pop(trial_id, None)
        self.created.discard(trial_id)
        self.book.forget(trial_id)

    def _keep_model(self, trial: Any, run_id: str, status: str, tags: dict[str, str], best: Kept,
                    new: bool = False) -> None:
        """:meth:`_keep_checkpoint`; an error of the trial's own (the store answers) is said and tagged, and
        the run ends all the same; a store that does not answer raises, so the ending is retried."""
        try:
            self._keep_checkpoint(trial, run_id, status, tags, best, new=new)
        except Exception as exc:
            if not self._answers(run_id):
                raise
            text = redaction.scrub(str(exc), self.secrets).strip().splitlines()
            log.warning("trial %s: no model of its best checkpoint %s (%s); its run ends without one", trial.trial_id,
                        best.uri, text[0] if text else type(exc).__name__)
            tags["sweeps.model_error"] = (text[0] if text else type(exc).__name__)[:500]

    def _answers(self, run_id: str) -> bool:
        """The store answers a plain read (so a failed write was refused, not lost)."""
        try:
            self.client.get_run(run_id)
        except Exception:  # down, or unreachable: the write is retried
            return False
        return True

    def _keep_checkpoint(self, trial: Any, run_id: str, status: str, tags: dict[str, str], best: Kept,
                         new: bool = False) -> None:
        """The trial's best checkpoint as its LoggedModel (:mod:`sweeps.tracking.models`), or as the run's
        artifacts where the store has no LoggedModels; a checkpoint missing from storage is said, not fatal."""
        from sweeps.tracking import models

        if not uris.is_dir(best.uri):
            log.warning("trial %s: its best checkpoint %s is not in storage any more; no model kept",
                        trial.trial_id, best.uri)
            tags["sweeps.checkpoint_missing"] = best.uri
            return
        if models.supported(self.client, self.uri):
            params = {k: v for k, v in (trial.config or {}).items() if not str(k).startswith("_")}
            try:
                made = models.upsert(self.client, self.experiment_id, run_id, self.sweep_id, trial.trial_id,
                                     best.uri, best.result, params, model_status(status, tags),
                                     donor=best.donor, dataset=self.dataset,
                                     kind="confirm" if self.confirm else "trial", new=new)
            except Exception as exc:
                if not models.missing_api(exc):
                    raise
                models.degrade(self.uri, exc)  # a server without LoggedModels that did not say its version
            else:
                tags["best_model"] = f"models:/{made.model_id}"
                return
        with uris.local_copy(best.uri) as folder:
            self.client.log_artifacts(run_id, folder, artifact_path="checkpoint")

    def drain(self, timeout_s: float = 120.0) -> bool:
        """Retry pending writes until they all succeed or ``timeout_s`` passes. True when nothing is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.flush(force=True) and not self.finals:
                if self.uploads.wait(max(deadline - time.monotonic(), 0.0)):
                    return True
                left = self.uploads.cut_short()
                log.warning("%d model upload(s) did not finish within %.0f s; their runs ended without the model",
                            left, timeout_s)
                return False
            if time.monotonic() > deadline:
                left = sum(map(len, self.buffers.values()))
                log.warning("MLflow still unreachable: %d metric value(s) and %d run ending(s) not written; "
                            "`python -m sweeps sync SWEEP_ID` back-fills them from the Ray results",
                            left, len(self.finals))
                return False
            time.sleep(2.0)

    def _log_error(self, run_id: str, text: str) -> None:
        with tempfile.TemporaryDirectory() as d:
            Path(d, "error.txt").write_text(text)
            self.client.log_artifact(run_id, os.path.join(d, "error.txt"))
        self.client.set_tag(run_id, "error", text.strip().splitlines()[-1][:500] if text.strip() else "")

    def close_open(self, status: str = "KILLED") -> None:
        """End every run this tracker opened that is not final yet (Ctrl-C, crash), within ``drain_s``."""
        deadline = time.monotonic() + self.drain_s
        self.drain(timeout_s=self.drain_s)
        self.dedupe()
        for run_id in sorted(self.opened):
            if time.monotonic() > deadline:
                log.warning("MLflow: %d run(s) left open after %.0f s; `python -m sweeps sync` closes them",
                            len(self.opened), self.drain_s)
                return
            try:
                self.client.set_terminated(run_id, status=status)
                self.opened.discard(run_id)
            except Exception as exc:
                log.warning("MLflow: could not close run %s (%s)", run_id, exc)


def model_status(status: str, tags: dict[str, str]) -> str:
    """A model's ``sweeps.status`` from how its trial ended: ``failed``, ``stopped`` (an operator's
    ``sweeps trial stop``), ``early-stopped`` (short of its epochs) or ``completed``."""
    if status == "FAILED":
        return "failed"
    if tags.get("sweeps.stopped_by"):
        return "stopped"
    return "early-stopped" if tags.get("early_stopped") == "true" else "completed"
