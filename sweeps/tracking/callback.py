"""The tracker's hooks: one nested child run per trial, always left in a final state.

All writes happen on the driver (so a SQLite store has a single writer however many trials run), on the tracker's
writer thread when Tune calls them (:mod:`sweeps.tracking.queued`). Metrics are buffered per trial and sent with
``log_batch``; a failed send keeps the buffer and is retried at the next flush, so an MLflow server that is down
for a while loses nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sweeps import uris
from sweeps.config import redaction
from sweeps.lease import driver_id
from sweeps.tracking import trialruns
from sweeps.tracking.bestbook import LINEAGE_TAG, BestBook, Kept
from sweeps.tracking.client import (
    PARENT_TAG,
    RUN_TAG_CONFIRM,
    RUN_TAG_DIGEST,
    RUN_TAG_DRIVER,
    RUN_TAG_KIND,
    RUN_TAG_SWEEP,
    RUN_TAG_TRIAL,
    SKIP_RESULT_KEYS,
    CallTimer,
    client,
    find_runs,
    log_params,
    param_items,
    send_batches,
    tag_items,
)
from sweeps.tracking.endings import Endings
from sweeps.tracking.preempted import Spots
from sweeps.trials import config_digest, trial_location

log = logging.getLogger(__name__)
# a scheduler's event -> (the metric its point goes to, the tag that counts them)
RUNG_EVENTS = {"pause": ("sweeps/paused_at", "sweeps.pauses"), "promotion": ("sweeps/promoted_to", "sweeps.promotions"),
               "resume": ("sweeps/resumed_at", "sweeps.resumes")}


class _Tracker(Endings):
    """Tune callback body: child runs, batched metrics, best checkpoints, final statuses."""

    def __init__(self, *, uri: str, experiment_id: str, parent_run_id: str, sweep_id: str, metric: str,
                 mode: str, fixed_params: Mapping[str, Any], flush_interval_s: float = 2.0,
                 log_checkpoints: bool = True, epochs: int | None = None, secrets: Iterable[str] = (),
                 confirm: bool = False, storage_path: str = "",
                 dataset: tuple[str, str] | None = None, max_models: int = 0) -> None:
        self.secrets = set(secrets) | redaction.known()
        self.uri = redaction.public_uri(uri)  # the password (if any) stays in this process's memory only
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.sweep_id = sweep_id
        self.metric = metric
        self.mode = mode
        self.fixed_params = redaction.redact(dict(fixed_params), self.secrets)  # never held in plaintext
        self.flush_interval_s = flush_interval_s
        self.log_checkpoints = log_checkpoints
        self.max_models = max_models  # 0: every trial with a checkpoint gets a model; N: those among the best N
        self.modelled: list[float] = []  # a heap of the best N values whose trials got a model (the worst on top)
        self.epochs = epochs
        self.confirm = confirm  # these trials re-run a configuration with a fresh seed (`sweeps confirm`)
        self.timer = CallTimer()
        self.drain_s = 120.0  # how long the end of the sweep waits for MLflow; short once a signal came
        self.runs: dict[str, str] = {}  # trial id -> run id
        self.opened: set[str] = set()  # run ids this process created or set RUNNING (status and driver tag set)
        self.attempted: set[str] = set()  # trial ids whose create_run raised: the server may have made the run
        self.buffers: dict[str, list[Any]] = {}
        self.params_due: dict[str, list[Any]] = {}  # trial id -> its params, sent with its run's next batch
        self.created: set[str] = set()  # trial ids whose run this tracker created: no model of theirs exists yet
        self.finals: dict[str, tuple[Any, str, dict[str, str], str | None, Kept | None]] = {}
        self.last_flush = 0.0
        self.failed_sends = 0
        self._client: Any = None
        self.storage_path = storage_path  # the trials' folders are on its filesystem
        self.dataset = dataset  # (name, digest) the trainable declares: its models' metrics name it
        self.book = BestBook(metric, mode)  # each running trial's best checkpoint (the model's) and PBT lineage
        self.noted: dict[str, dict[str, str]] = {}  # trial id -> tags its run gets when it ends (an operator's stop)
        self.lineages: dict[str, str] = {}  # a resumed sweep: trial id -> its run's lineage tag, until it restarts
        self.spots = Spots()  # each trial's node preemptions: tags its run gets when it ends
        self.rungs: dict[str, dict[str, int]] = {}  # trial id -> pauses, promotions, resumes (its run's tags)
        self.tags_due: dict[str, dict[str, str]] = {}  # trial id -> tags sent with its run's next batch
        self.steps: dict[str, int] = {}  # trial id -> the last training_iteration seen

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # Tune pickles its callbacks into tuner.pkl: never pickle a live client
        state["opened"] = set()  # a restored sweep's driver must reopen its runs (the dead driver's are KILLED)
        state["created"] = set()  # a restored tracker's runs were made by a dead driver: their models may exist
        state["secrets"] = set()  # no secret at rest: a restored tracker is replaced by a fresh one (resume)
        state["_fs"] = None
        state["_uploads"] = None  # a thread and its queue: the tracker that runs makes its own
        state["_writer"] = None
        return state

    @property
    def storage_fs(self) -> Any:
        if getattr(self, "_fs", None) is None:
            self._fs = uris.filesystem(self.storage_path)[0] if self.storage_path else None
        return self._fs

    def note_tags(self, trial_id: str, tags: dict[str, str]) -> None:
        """Tags the trial's run gets with its final ones (who stopped it, and when). ``sweeps.donor`` (a PBT
        exploit, now) goes into the trial's lineage instead: its model names the donor its checkpoint descends
        from, and the run holds the lineage at once (``sweeps.lineage``, read back by a resumed tracker)."""
        tags = dict(tags)
        donor = tags.pop("sweeps.donor", None)
        if donor:
            text = self.book.exploited(trial_id, donor, time.time())
            run_id = self.runs.get(trial_id)
            if run_id:
                self._safe(lambda: self.client.set_tag(run_id, LINEAGE_TAG, text))
        if tags:
            self.noted.setdefault(trial_id, {}).update(tags)

    def note_rung(self, trial_id: str, kind: str, where: float) -> None:
        """A scheduler's pause (at epoch ``where``), promotion (to rung ``where``) or resume (from epoch
        ``where``), as the scheduler decided it: the trial's run gets a point of ``sweeps/paused_at``,
        ``sweeps/promoted_to`` or ``sweeps/resumed_at`` and its counts as tags (``sweeps.pauses``,
        ``sweeps.promotions``, ``sweeps.resumes``), with its next batch of metrics (no call of its own)."""
        from mlflow.entities import Metric

        metric, tag = RUNG_EVENTS[kind]
        counts = self.rungs.setdefault(trial_id, {})
        counts[tag] = counts.get(tag, 0) + 1
        step = self.steps.get(trial_id, int(where))
        self.buffers.setdefault(trial_id, []).append(Metric(metric, float(where), int(time.time() * 1000), step))
        self.tags_due.setdefault(trial_id, {})[tag] = str(counts[tag])
        self.noted.setdefault(trial_id, {})[tag] = str(counts[tag])

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        """Tune registers a checkpoint with the result it came with (``trial.last_result`` here)."""
        self.book.add(trial.trial_id, uris.to_uri(checkpoint.path, checkpoint.filesystem), trial.last_result)

    # -- plumbing ---------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client(self.uri)
        return self._client

    def _existing_runs(self) -> dict[str, str]:
        runs = find_runs(self.client, [self.experiment_id], f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'")
        self.lineages.update({r.data.tags[RUN_TAG_TRIAL]: r.data.tags[LINEAGE_TAG] for r in runs
                              if RUN_TAG_TRIAL in r.data.tags and LINEAGE_TAG in r.data.tags})
        for r in runs:  # a resumed sweep counts on from what its runs say
            counts = {tag: int(r.data.tags[tag]) for _, tag in RUNG_EVENTS.values()
                      if str(r.data.tags.get(tag, "")).isdigit()}
            if counts and RUN_TAG_TRIAL in r.data.tags:
                self.rungs[r.data.tags[RUN_TAG_TRIAL]] = counts
        return {r.data.tags[RUN_TAG_TRIAL]: r.info.run_id for r in runs if RUN_TAG_TRIAL in r.data.tags}

    def setup(self, **info: Any) -> None:
        with self.timer:
            self.runs.update(self._existing_runs())  # resume: reuse the same runs, never duplicate them

    def _seed(self, trial: Any) -> None:
        """A resumed trial (its run is a dead driver's): its best checkpoint and lineage so far, from storage."""
        location = trial_location(trial, self.storage_fs)
        if not location:
            return
        try:
            read = self.book.seed(trial.trial_id, location, self.lineages.pop(trial.trial_id, None))
        except Exception as exc:  # noqa: BLE001 - storage unreadable: the model is chosen from what follows
            log.warning("trial %s: could not read its checkpoints from before the resume (%s)", trial, exc)
            return
        log.debug("trial %s: %d checkpoint(s) from before the resume", trial.trial_id, read)

    def _adopt(self, tid: str) -> str | None:
        """After a ``create_run`` that raised: take the trial's first run as this driver's, delete its copies."""
        kept, deleted = trialruns.keep_one(self.client, self.experiment_id, self.parent_run_id, tid,
                                           self.runs.get(tid))
        self.opened.difference_update(deleted)
        if kept is not None:
            self.runs[tid] = kept
            self.opened.add(kept)
        return kept

    def dedupe(self) -> None:
        """The end of the sweep: no trial keeps a second run from a retried ``create_run`` (one query)."""
        try:
            runs = find_runs(self.client, [self.experiment_id], f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'")
            for run_id in trialruns.copies(runs, self.runs):
                self.client.delete_run(run_id)  # an empty duplicate: never left RUNNING
                self.opened.discard(run_id)
        except Exception as exc:
            log.warning("MLflow: could not check the sweep's runs for duplicates (%s)", exc)

    def _run_for(self, trial: Any) -> str:
        tid = trial.trial_id
        if tid in self.runs:
            return self.runs[tid]
        with self.timer:
            if tid in self.attempted and self._adopt(tid):
                log_params(self.client, self.runs[tid], {**self.fixed_params, **{
                    k: v for k, v in trial.config.items() if not str(k).startswith("_")}})
                return self.runs[tid]
            self.attempted.add(tid)  # until create_run returns
            tags = {PARENT_TAG: self.parent_run_id, RUN_TAG_SWEEP: self.sweep_id, RUN_TAG_TRIAL: tid,
                    RUN_TAG_KIND: "trial", RUN_TAG_DRIVER: driver_id(),
                    RUN_TAG_DIGEST: config_digest(dict(trial.config))}
            if self.confirm:
                tags[RUN_TAG_CONFIRM] = "true"
            run = self.client.create_run(self.experiment_id, run_name=str(trial), tags=tags)
            self.attempted.discard(tid)  # it answered; copies from the client's own retries go in dedupe()
            self.runs[tid] = run.info.run_id
            self.opened.add(run.info.run_id)  # create_run starts it RUNNING, with this driver's tag
            self.created.add(tid)
        sampled = {k: v for k, v in trial.config.items() if not str(k).startswith("_")}
        self.params_due[tid] = param_items({**self.fixed_params, **sampled})
        self._send(tid, self.runs[tid])  # at once (a running trial shows its params); else with its next batch
        return self.runs[tid]

    def _send(self, tid: str, run_id: str, tags: list[Any] | None = None) -> None:
        """The trial's pending params and metrics (and ``tags``), in as few calls as MLflow takes; what could not
        be sent stays pending (raises)."""
        params, buf = self.params_due.get(tid, []), self.buffers.get(tid, [])
        due = self.tags_due.get(tid)
        if due:  # the given tags (a run's final ones) win over the same key due
            tags = tag_items({**due, **{t.key: t.value for t in tags or []}})
        if not (params or buf or tags):
            return
        with self.timer:
            send_batches(self.client, run_id, params, buf, tags if tags is not None else [])
        self.params_due.pop(tid, None)
        self.tags_due.pop(tid, None)

    def flush(self, force: bool = False) -> bool:
        """Send buffered metrics; keep them on failure. Returns True when nothing is left pending."""
        now = time.monotonic()
        if not force and now - self.last_flush < self.flush_interval_s:
            return False
        self.last_flush = now
        ok = True
        for tid in dict.fromkeys([*self.buffers, *self.params_due, *self.tags_due]):
            if tid in self.finals or not (self.buffers.get(tid) or self.params_due.get(tid) or self.tags_due.get(tid)):
                continue  # an ended trial's go with its ending (one batch with its final tags)
            run_id = self.runs.get(tid)
            if run_id is None:
                ok = False  # its run could not be created yet: retried on the trial's next result or end
                continue
            try:
                self._send(tid, run_id)
            except Exception as exc:  # server down: keep the rest, retry at the next flush
                self.failed_sends += 1
                ok = False
                if self.failed_sends in (1, 10) or self.failed_sends % 100 == 0:
                    log.warning("MLflow unreachable (%s); %d metric(s) buffered for retry",
                                type(exc).__name__, sum(map(len, self.buffers.values())))
                break
        if ok and self.finals:
            ok = self._try_finals()
        return ok

    # -- Tune callback hooks ----------------------------------------------------------------------------
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        try:
            run_id = self._run_for(trial)
            if run_id in self.opened:
                return  # new this sweep, or still RUNNING from this driver (a PBT pause and restart)
            with self.timer:  # a resumed sweep's run: it was closed as KILLED by the driver that died
                self.client.update_run(run_id, status="RUNNING")
                self.client.set_tag(run_id, RUN_TAG_DRIVER, driver_id())
            self.opened.add(run_id)
            self._seed(trial)
        except Exception as exc:
            log.warning("MLflow: could not open the run of %s (%s); metrics stay buffered", trial, exc)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        from mlflow.entities import Metric

        step = int(result.get("training_iteration", 0))
        self.steps[trial.trial_id] = step
        ts = int(result.get("timestamp", time.time()) * 1000)
        buf = self.buffers.setdefault(trial.trial_id, [])
        spot = self.spots.tags(trial.trial_id, result)
        if spot:
            self.noted.setdefault(trial.trial_id, {}).update(spot)
        for k, v in result.items():
            if k in SKIP_RESULT_KEYS or isinstance(v, bool) or not isinstance(v, int | float):
                continue
            buf.append(Metric(k, float(v), ts, step))
        # the hyperparameters in force at each step: PBT's explore shows up as a schedule
        for k, v in trial.config.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and not str(k).startswith("_"):
                buf.append(Metric(f"hp/{k}", float(v), ts, step))
        if trial.trial_id not in self.runs:
            try:
                self._run_for(trial)
            except Exception:  # retried at the next result
                return
        self.flush()

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        run_id = self.runs.get(trial.trial_id)
        if run_id:
            self._safe(lambda: self.client.set_tag(run_id, "retries", str(trial.num_failures)))

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._finish(trial, "FINISHED")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._finish(trial, "FAILED")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.drain(self.drain_s)
