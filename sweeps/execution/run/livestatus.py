"""The Tune callback behind ``sweeps status`` and the control verbs: it writes the sweep's status into its
storage and applies the requests it finds there (:mod:`sweeps.execution.run.control`, :mod:`sweeps.live`)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from sweeps import lease, live, store
from sweeps.execution.run import control, session

log = logging.getLogger(__name__)
LAUNCHED = "SWEEPS_LAUNCHED_BY"  # cli | schedule | api (set by the caller); a Ray Job is seen by its lever


def launched_by() -> str:
    from sweeps.execution.levers import job_entrypoint

    if job_entrypoint.in_job():
        return "ray job"
    return os.environ.get(LAUNCHED, "cli")


def counts(trials: list[Any], epochs: int | None) -> dict[str, int]:
    out = {"running": 0, "waiting": 0, "done": 0, "stopped_early": 0, "failed": 0}
    for t in trials:
        if t.status == "RUNNING":
            out["running"] += 1
        elif t.status in ("PENDING", "PAUSED"):
            out["waiting"] += 1
        elif t.status == "ERROR":
            out["failed"] += 1
        elif t.status == "TERMINATED":
            budget = (t.config or {}).get("epochs", epochs)
            done = (t.last_result or {}).get("training_iteration", 0) or 0
            out["stopped_early" if budget and done < budget else "done"] += 1
    return out


def held(trials: list[Any], per_trial: dict[str, float]) -> dict[str, Any]:
    running = [t for t in trials if t.status == "RUNNING"]
    nodes = sorted({str((t.last_result or {}).get("node_ip")) for t in running if (t.last_result or {}).get("node_ip")})
    return {**{k: v * len(running) for k, v in per_trial.items() if k in ("CPU", "GPU")}, "nodes": nodes}


def callback(name: str, sweep_id: str, experiment_dir: str, per_trial: dict[str, float], progress: Any,
             total: int | None) -> Any:
    """The run ``name``'s live-record callback."""
    from ray.tune import Callback

    class LiveRecord(_LiveRecord, Callback):  # type: ignore[misc]
        pass

    return LiveRecord(name, sweep_id, experiment_dir, per_trial, progress, total)


class _LiveRecord:
    """The callback's body: status written every few seconds, requests read and answered."""

    def __init__(self, name: str, sweep_id: str, experiment_dir: str, per_trial: dict[str, float], progress: Any,
                 total: int | None) -> None:
        self.name, self.sweep_id, self.experiment_dir, self.per_trial = name, sweep_id, experiment_dir, per_trial
        self.progress, self.total = progress, total
        self.written_at = self.polled_at = 0.0
        self.started = time.time()
        self.trials: list[Any] = []  # as of Tune's last step
        self.lock = threading.Lock()  # Tune's loop and the run's heartbeat both write the status
        self.last: dict[str, Any] | None = None  # the status as last built (the heartbeat renews its lease)
        self.unwritten = False  # the last status could not be written: the heartbeat tries again
        self.unanswered: dict[str, tuple[str, str]] = {}  # request id -> (state, why) not yet written
        self.put_at = 0.0  # when a status was last written
        self.failures = 0

    def tick(self) -> None:
        """Between Tune's steps (its loop waiting for a trial): read the requests, keep the status fresh."""
        self.on_step_begin(-1, self.trials)

    def state(self, c: control.Control) -> str:
        return "stopping" if c.stopping else "paused" if c.paused else "running"

    def status(self, trials: list[Any], state: str | None = None) -> dict[str, Any]:
        c, live_session = control.control_of(self.name), session.session(self.name)
        me, watch, best = lease.me(), live_session.watch, self.progress.best
        earlier = session.earlier(self.name)  # an extension's status counts the sweep's earlier trials too
        planned = live_session.planned or ((self.total + len(earlier)) if self.total else None)
        return {
            "sweep_id": self.sweep_id, "run": c.run, "state": state or self.state(c), "updated": time.time(),
            "driver": {"host": me.host, "pid": me.pid, "token": me.token, "proc": me.proc, "started": self.started,
                       "launched_by": launched_by(), "lease_expires": lease.expiry()},
            "trials": {**counts([*earlier, *trials], self.progress.epochs), "planned": planned},
            "metric": self.progress.metric, "mode": self.progress.mode,
            "best": {"value": best[0], "trial_id": best[1], "params": best[2]} if best else None,
            "elapsed_s": time.time() - self.progress.start, "left": self.progress.left_text(),
            "held": held(trials, self.per_trial),
            "last_progress": getattr(watch, "last_progress", None),
            "paused": c.paused, "stopping": c.stopping, "trial_stops": c.trial_stops,
        }

    def write(self, trials: list[Any], state: str | None = None) -> None:
        status = self.status(trials, state)
        with self.lock:
            self.last = status
            self._put(status)

    def _put(self, status: dict[str, Any]) -> bool:
        """Write ``status`` (the lock held); a failure is said (at its first and every tenth) and retried."""
        try:
            live.write_status(self.experiment_dir, status)
        except Exception as exc:  # the record is for operators: a failed write is retried, never fatal
            self.unwritten = True
            self._failed("write the sweep's status", exc)
            return False
        self.unwritten, self.put_at = False, time.time()
        return True

    def _failed(self, what: str, exc: Exception) -> None:
        self.failures += 1
        if self.failures == 1 or self.failures % 10 == 0:
            log.warning("could not %s in %s (%s: %s); the sweep goes on and tries again every few seconds",
                        what, live.folder(self.experiment_dir), type(exc).__name__, exc)

    def answer(self, request_id: str, state: str, why: str) -> None:
        """Answer a request; one that cannot be written now is kept and written at the next tick or beat."""
        with self.lock:
            self.unanswered[request_id] = (state, why)
            self._answer_kept()

    def _answer_kept(self) -> None:
        for request_id, (state, why) in list(self.unanswered.items()):
            try:
                live.answer(self.experiment_dir, request_id, state, why)
            except Exception as exc:
                self._failed(f"write the answer to request {request_id}", exc)
                return
            del self.unanswered[request_id]
            if self.failures:
                log.info("the answer to request %s is written now (%s)", request_id, state)

    def beat(self) -> None:
        """The run's heartbeat (its own thread, whatever Tune's loop is doing): the driver's lease in the status
        renewed, and what could not be written (the status, answers) written now."""
        with self.lock:
            if self.last is None:
                return
            if self.unwritten or time.time() - self.put_at >= lease.LEASE_S / 4:  # else Tune's loop keeps it fresh
                self.last["driver"]["lease_expires"] = lease.expiry()
                self._put(self.last)
            self._answer_kept()
            if not self.unwritten and not self.unanswered and self.failures:
                log.info("the sweep's live status is written again")
                self.failures = 0

    def poll(self, trials: list[Any]) -> None:
        c = control.control_of(self.name)
        try:
            pending = [r for r in live.requests(self.experiment_dir) if r["id"] not in c.handled]
            done = live.answered(self.experiment_dir) if pending else set()
        except Exception as exc:  # storage unreachable for a moment: the next poll tries again
            self._failed("read the control requests", exc)
            return
        if self.unanswered:
            with self.lock:
                self._answer_kept()
        for request in pending:
            c.handled.add(request["id"])
            if request["id"] in done:
                continue  # answered by an earlier run of the sweep: never applied twice
            state, why = control.apply(c, request, trials)
            self.answer(request["id"], state, why)
            if state == "applied" and request.get("verb") in ("pause", "unpause"):
                self.note_state("paused" if c.paused else "")
            stop = c.trial_stops.get(str(request.get("trial_id"))) if state == "accepted" else None
            tracker: Any = session.session(self.name).callbacks.get("given0")
            if stop and tracker is not None and hasattr(tracker, "note_tags"):
                tracker.note_tags(str(request["trial_id"]), {"sweeps.stopped_by": stop["by"],
                                                             "sweeps.stopped_at": f"{stop['at']:.0f}"})
            (log.warning if state == "refused" else log.info)(
                "%s from %s: %s (%s)", request.get("verb"), (request.get("sender") or {}).get("user"), state, why)
            self.written_at = 0.0  # say so in the status at once

    def note_state(self, state: str) -> None:
        """The sweep's index record says paused while it is (``sweeps list``)."""
        try:
            store.update(self.sweep_id, live_state=state)
        except Exception as exc:  # a Tuner outside a recorded sweep, or a busy index: the live record says it
            log.debug("could not note %r in the sweep's record (%s)", state, exc)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        session.session(self.name).interrupt.step_ended(trials)  # a stop that waits for checkpoints in flight

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        now = time.time()
        self.trials = trials
        if now - self.polled_at >= control.EVERY_S:
            self.polled_at = now
            self.poll(trials)
        c = control.control_of(self.name)
        running = _running(trials)
        c.note_idle(now, bool(running))
        watch = session.session(self.name).watch
        if c.paused and watch is not None and not running:
            watch.last_progress = now  # a pause is not a stall
        if c.stopping and (c.stopping["now"] or not set(c.stopping["waiting"]) & running):
            self.stop(c, trials)
        if now - self.written_at >= control.EVERY_S:
            self.written_at = now
            self.write(trials)

    def stop(self, c: control.Control, trials: list[Any]) -> None:
        if c.stopping.get("applied"):  # type: ignore[union-attr]
            return
        c.stopping["applied"] = time.time()  # type: ignore[index]
        if c.stopping.get("request"):  # type: ignore[union-attr]
            self.answer(c.stopping["request"], "applied", "the sweep stops now, resumably")  # type: ignore[index]
        self.write(trials, "stopping")
        control.request_stop(self.name, f"`sweeps stop{' --now' if c.stopping.get('now') else ''}` by "  # type: ignore[union-attr]
                                        f"{c.stopping['by']}")  # type: ignore[index]

    def reported(self, trial_id: str) -> None:
        """A trial a graceful stop waits for has saved a checkpoint (or ended): it no longer holds the stop."""
        c = control.control_of(self.name)
        if c.stopping and trial_id in c.stopping["waiting"]:
            c.stopping["waiting"].remove(trial_id)

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        self.reported(trial.trial_id)  # a report without a checkpoint (checkpoint_every > 1) does not count

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        c = control.control_of(self.name)
        stop = c.trial_stops.get(trial.trial_id)
        if stop and not stop.get("applied"):
            stop["applied"] = time.time()
            self.answer(stop["request"], "applied", f"trial {trial.trial_id} stopped")
        self.reported(trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.on_trial_complete(iteration, trials, trial)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.write(trials)
        if self.unanswered:
            log.warning("%d answer(s) to control requests could not be written to %s: %s", len(self.unanswered),
                        live.folder(self.experiment_dir), ", ".join(self.unanswered))


def _running(trials: list[Any]) -> set[str]:
    return {t.trial_id for t in trials if t.status == "RUNNING"}


def final(experiment_dir: str, state: str, counts_: dict[str, int], best: dict[str, Any] | None) -> None:
    """The status a sweep ends with (its record's counts, :func:`sweeps.reports.summary.collect`'s), so ``status``
    reads a finished sweep the same way: nothing runs, is held, paused or stopping any more (a stop that ended it
    is kept as ``stopped``: who, when)."""
    try:
        status = live.read_status(experiment_dir) or {}
        stopping = status.get("stopping") or {}
        status.update(state=state, updated=time.time(), best=best or status.get("best"), held={}, left="",
                      paused=None, stopping=None,
                      stopped={"by": stopping.get("by"), "at": stopping.get("applied") or stopping.get("since"),
                               "now": stopping.get("now")} if stopping else status.get("stopped"))
        status.setdefault("trials", {}).update(
            running=0, waiting=counts_.get("unfinished", 0), done=counts_.get("completed", 0),
            stopped_early=counts_.get("early_stopped", 0), failed=counts_.get("failed", 0))
        status.setdefault("driver", {})["lease_expires"] = None
        live.write_status(experiment_dir, status)
    except Exception as exc:  # the index record still says how it ended
        log.warning("could not write the sweep's final status (%s); its record says how it ended", exc)


def beat(name: str) -> None:
    """The heartbeat of the run ``name``: its live record's :meth:`_LiveRecord.beat` (none yet: nothing)."""
    record = session.session(name).callbacks.get("live")
    if record is not None and hasattr(record, "beat"):
        record.beat()
