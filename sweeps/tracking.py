"""MLflow tracking: one parent run per sweep, one nested child run per trial, always left in a final state.

All writes happen on the driver, in a Ray Tune ``Callback`` (so a SQLite store has a single writer however
many trials run). Metrics are buffered per trial and sent with ``log_batch``; a failed send keeps the buffer
and is retried at the next flush, so an MLflow server that is down for a while loses nothing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import tempfile
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sweeps import security
from sweeps.errors import BadInput

log = logging.getLogger(__name__)

TAG_SWEEP = "sweeps.sweep_id"
TAG_TRIAL = "sweeps.trial_id"
TAG_KIND = "sweeps.kind"  # "sweep" or "trial"
TAG_DRIVER = "sweeps.driver"  # host:pid of the process that owns the open run
PARENT_TAG = "mlflow.parentRunId"
SKIP_RESULT_KEYS = {
    "timestamp", "pid", "done", "training_iteration", "iterations_since_restore", "time_since_restore",
    "date", "hostname", "node_ip", "trial_id", "experiment_tag", "checkpoint_dir_name", "should_checkpoint",
}
MAX_PARAMS, MAX_METRICS, MAX_TAGS = 100, 1000, 100
TERMINAL = ("FINISHED", "FAILED", "KILLED")


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def configure_client_env(uri: str) -> None:
    """Short HTTP timeouts: MLflow's own client retries an unreachable server for minutes."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def probe(uri: str, timeout_s: float = 5.0, key: str = "tracking.uri") -> None:
    """Fail fast (seconds) on a malformed or unreachable tracking URI.

    Raises:
        BadInput: naming ``tracking.uri`` and what went wrong.
    """
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https"):
        import urllib.error as urlerror
        import urllib.request as urlrequest

        if not parsed.hostname:
            raise BadInput(f"{key}: {uri!r} has no host; use http://HOST:PORT")
        url = uri.rstrip("/") + "/health"
        try:
            with urlrequest.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (scheme checked)
                if resp.status >= 500:
                    raise BadInput(f"{key}: the MLflow server at {uri} answered {resp.status}")
        except BadInput:
            raise
        except urlerror.HTTPError as exc:
            if exc.code >= 500:
                raise BadInput(f"{key}: the MLflow server at {uri} answered {exc.code}") from None
            if exc.code in (401, 403):
                raise BadInput(f"{key}: {uri} refused the request ({exc.code}); set MLFLOW_TRACKING_USERNAME/"
                               f"MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN") from None
            # another 4xx: something answers; MLflow's first call will say more
        except Exception as exc:
            raise BadInput(f"{key}: no MLflow server answers at {uri} within {timeout_s:g}s ({exc}); "
                           f"start one (`mlflow server --host 127.0.0.1 --port PORT`) or drop {key} "
                           f"to use the embedded SQLite store") from None
    elif parsed.scheme == "sqlite":
        path = uri[len("sqlite:///"):]
        folder = Path(path).parent if path else None
        if folder is not None and folder.exists() and not os.access(folder, os.W_OK):
            raise BadInput(f"{key}: cannot write the SQLite store's folder {folder}")


def artifact_root(uri: str) -> str | None:
    """For a local SQLite store, artifacts go beside the database (not into ./mlruns)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
    return None


def client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    configure_client_env(uri)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def get_or_create_experiment(c: Any, name: str, uri: str) -> str:
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        return str(exp.experiment_id)
    root = artifact_root(uri)
    return str(c.create_experiment(name, artifact_location=f"{root}/{name}" if root else None))


def chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> ``{"a.b": "value"}`` with values as MLflow param strings (max 6000 chars)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat_params(v, key + "."))
        else:
            out[key] = str(v)[:6000]
    return out


def log_params(c: Any, run_id: str, params: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in flat_params(security.redact(params)).items()]
    for chunk in chunks(items, MAX_PARAMS):
        c.log_batch(run_id, params=chunk)


def set_tags(c: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, str(v)[:5000]) for k, v in security.redact(dict(tags)).items()]
    for chunk in chunks(items, MAX_TAGS):
        c.log_batch(run_id, tags=chunk)


def find_runs(c: Any, experiment_ids: list[str], filter_string: str, max_results: int = 5000) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = c.search_runs(experiment_ids, filter_string=filter_string, max_results=min(max_results, 1000),
                             page_token=token)
        runs.extend(page)
        token = page.token
        if not token or len(runs) >= max_results:
            return runs


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive_here(driver: str) -> bool:
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's driver: not ours to judge
    return pid_alive(int(pid))


def close_stale_runs(c: Any, reason: str = "driver died") -> int:
    """Mark KILLED every sweeps run left RUNNING by a driver process that no longer exists on this host.

    Called by ``run``, ``resume``, ``sync`` and ``report`` so a SIGKILLed driver never leaves runs RUNNING.
    """
    from mlflow.entities import ViewType

    closed = 0
    exps = [e.experiment_id for e in c.search_experiments(view_type=ViewType.ALL)]
    if not exps:
        return 0
    for run in find_runs(c, exps, f"attributes.status = 'RUNNING' and tags.`{TAG_SWEEP}` != ''"):
        driver = run.data.tags.get(TAG_DRIVER, "")
        if driver == driver_id() or (driver and _alive_here(driver)):
            continue
        c.set_tag(run.info.run_id, "sweeps.closed_reason", reason)
        c.set_terminated(run.info.run_id, status="KILLED")
        closed += 1
    if closed:
        log.warning("closed %d MLflow run(s) left RUNNING by a dead driver (marked KILLED)", closed)
    return closed


class _Timer:
    """Adds up the seconds spent in MLflow calls (reported as ``sweeps/mlflow_seconds``)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> _Timer:
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._t


def make_callback(**kwargs: Any) -> Any:
    """Build the Tune callback (Tune is imported lazily, so this module stays light)."""
    from ray.tune import Callback

    class MlflowTrackingCallback(_Tracker, Callback):  # type: ignore[misc]
        pass

    return MlflowTrackingCallback(**kwargs)


class _Tracker:
    """Tune callback body: child runs, batched metrics, best checkpoints, final statuses."""

    def __init__(self, *, uri: str, experiment_id: str, parent_run_id: str, sweep_id: str, metric: str,
                 mode: str, fixed_params: Mapping[str, Any], flush_interval_s: float = 2.0,
                 log_checkpoints: bool = True, epochs: int | None = None, secrets: Iterable[str] = ()) -> None:
        self.uri = uri
        self.experiment_id = experiment_id
        self.parent_run_id = parent_run_id
        self.sweep_id = sweep_id
        self.metric = metric
        self.mode = mode
        self.fixed_params = dict(fixed_params)
        self.flush_interval_s = flush_interval_s
        self.log_checkpoints = log_checkpoints
        self.epochs = epochs
        self.secrets = set(secrets)
        self.timer = _Timer()
        self.runs: dict[str, str] = {}  # trial id -> run id
        self.opened: set[str] = set()  # run ids this process created or set RUNNING (status and driver tag set)
        self.buffers: dict[str, list[Any]] = {}
        self.best_ckpt: dict[str, tuple[float, str, int]] = {}  # trial id -> (score, path, iteration)
        self.finals: dict[str, tuple[Any, str, dict[str, str], str | None, str | None]] = {}
        self.last_flush = 0.0
        self.failed_sends = 0
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # Tune pickles its callbacks into tuner.pkl: never pickle a live client
        state["opened"] = set()  # a restored sweep's driver must reopen its runs (the dead driver's are KILLED)
        return state

    # -- plumbing ---------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client(self.uri)
        return self._client

    def _existing_runs(self) -> dict[str, str]:
        runs = find_runs(self.client, [self.experiment_id], f"tags.`{PARENT_TAG}` = '{self.parent_run_id}'")
        return {r.data.tags[TAG_TRIAL]: r.info.run_id for r in runs if TAG_TRIAL in r.data.tags}

    def setup(self, **info: Any) -> None:
        with self.timer:
            self.runs.update(self._existing_runs())  # resume: reuse the same runs, never duplicate them

    def _run_for(self, trial: Any) -> str:
        tid = trial.trial_id
        if tid in self.runs:
            return self.runs[tid]
        with self.timer:
            run = self.client.create_run(
                self.experiment_id, run_name=str(trial),
                tags={PARENT_TAG: self.parent_run_id, TAG_SWEEP: self.sweep_id, TAG_TRIAL: tid,
                      TAG_KIND: "trial", TAG_DRIVER: driver_id()},
            )
            self.runs[tid] = run.info.run_id
            self.opened.add(run.info.run_id)  # create_run starts it RUNNING, with this driver's tag
            sampled = {k: v for k, v in trial.config.items() if not str(k).startswith("_")}
            log_params(self.client, run.info.run_id, {**self.fixed_params, **sampled})
        return self.runs[tid]

    def _score(self, result: Mapping[str, Any]) -> float | None:
        v = result.get(self.metric)
        if not isinstance(v, int | float) or not math.isfinite(v) or result.get("sweeps/nonfinite"):
            return None
        return float(v) if self.mode == "max" else -float(v)

    def flush(self, force: bool = False) -> bool:
        """Send buffered metrics; keep them on failure. Returns True when nothing is left pending."""
        now = time.monotonic()
        if not force and now - self.last_flush < self.flush_interval_s:
            return False
        self.last_flush = now
        ok = True
        for tid, buf in list(self.buffers.items()):
            if not buf:
                continue
            run_id = self.runs.get(tid)
            if run_id is None:
                ok = False  # its run could not be created yet: retried on the trial's next result or end
                continue
            try:
                with self.timer:
                    for chunk in chunks(buf, MAX_METRICS):
                        self.client.log_batch(run_id, metrics=chunk)
                        del buf[:len(chunk)]
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
                self.client.set_tag(run_id, TAG_DRIVER, driver_id())
            self.opened.add(run_id)
        except Exception as exc:
            log.warning("MLflow: could not open the run of %s (%s); metrics stay buffered", trial, exc)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        from mlflow.entities import Metric

        step = int(result.get("training_iteration", 0))
        ts = int(result.get("timestamp", time.time()) * 1000)
        buf = self.buffers.setdefault(trial.trial_id, [])
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

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any,
                      **info: Any) -> None:
        score = self._score(trial.last_result or {})
        if score is None:
            return
        best = self.best_ckpt.get(trial.trial_id)
        if best is None or score > best[0]:
            self.best_ckpt[trial.trial_id] = (score, checkpoint.path,
                                              int((trial.last_result or {}).get("training_iteration", 0)))

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        run_id = self.runs.get(trial.trial_id)
        if run_id:
            self._safe(lambda: self.client.set_tag(run_id, "retries", str(trial.num_failures)))

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._finish(trial, "FINISHED")

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._finish(trial, "FAILED")

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.drain()

    # -- endings ----------------------------------------------------------------------------------------
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
        epoch = last.get("epoch")
        early = bool(status == "FINISHED" and self.epochs and isinstance(epoch, int | float)
                     and epoch < self.epochs)
        tags = {"status": "ERROR" if status == "FAILED" else "TERMINATED", "early_stopped": str(early).lower(),
                "retries": str(trial.num_failures), "trial_dir": trial.path or ""}
        error = None
        if status == "FAILED":
            error = "unknown error"
            from sweeps.results import error_path

            path = error_path(trial)
            if path is not None:
                error = path.read_text(errors="replace")
            error = security.scrub(error, self.secrets)
        best = self.best_ckpt.get(trial.trial_id)
        if best is not None:
            tags["best_checkpoint"] = best[1]
            tags["best_checkpoint_iteration"] = str(best[2])
        self.finals[trial.trial_id] = (trial, status, tags, error, best[1] if best else None)
        self.flush(force=True)

    def _try_finals(self) -> bool:
        for tid, (trial, status, tags, error, ckpt) in list(self.finals.items()):
            if self.buffers.get(tid):
                return False  # metrics first: a FINISHED run must already hold its history
            try:
                run_id = self._run_for(trial)
                with self.timer:
                    if error is not None:
                        self._log_error(run_id, error)
                    if ckpt and self.log_checkpoints and os.path.isdir(ckpt):
                        self.client.log_artifacts(run_id, ckpt, artifact_path="checkpoint")
                    set_tags(self.client, run_id, tags)
                    self.client.set_terminated(run_id, status=status)
                self.opened.discard(run_id)
                del self.finals[tid]
            except Exception as exc:
                log.warning("MLflow: could not finalize the run of %s yet (%s); will retry", trial, exc)
                return False
        return True

    def drain(self, timeout_s: float = 120.0) -> bool:
        """Retry pending writes until they all succeed or ``timeout_s`` passes. True when nothing is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.flush(force=True) and not self.finals:
                return True
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
        """End every run this tracker opened that is not final yet (Ctrl-C, crash)."""
        self.drain(timeout_s=60.0)
        for run_id in self.runs.values():
            try:
                if self.client.get_run(run_id).info.status not in TERMINAL:
                    self.client.set_terminated(run_id, status=status)
            except Exception as exc:
                log.warning("MLflow: could not close run %s (%s)", run_id, exc)


def write_json_artifact(c: Any, run_id: str, name: str, data: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
        c.log_artifact(run_id, path)


def write_text_artifact(c: Any, run_id: str, name: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        Path(path).write_text(text)
        c.log_artifact(run_id, path)
