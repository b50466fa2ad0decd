"""The run pipeline: compose -> spec -> plan -> tune (+ track) -> report -> promote.

Each stage takes the previous stage's object. Nothing here touches Ray, MLflow or disk until the whole config
has been validated and the plan fits.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps import compose, config, paths, plan, raystart, store, summary, tracking
from sweeps.config import SweepSpec
from sweeps.errors import BadInput

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a finished (or interrupted) sweep hands back to the CLI."""

    record: store.SweepRecord
    summary: summary.Summary
    interrupted: bool = False
    report_paths: list[str] = field(default_factory=list)
    promotion: str | None = None


def prepare(overrides: Sequence[str]) -> SweepSpec:
    """Compose and validate; raises BadInput before anything is started or written."""
    from sweeps.tuner import check_arguments

    spec = config.build_spec(compose.compose(overrides))
    check_arguments(spec)
    return spec


def dry_run(spec: SweepSpec) -> str:
    """The composed sweep, its space and the resource plan, as text (nothing is started)."""
    import json

    if spec.cluster.mode == "local":
        p = plan.make_plan(spec, plan.local_resources(spec), local=True)
        plan_text = p.describe()
    else:
        plan_text = (f"per trial      : {plan.per_trial(spec)}\n(remote cluster: concurrency is sized from "
                     f"its resources at launch)")
    lines = [
        f"sweep          : {spec.sweep.name} ({spec.sweep.metric}, {spec.sweep.mode})",
        f"trainable      : {spec.trainable.name} ({spec.trainable.loop}), {spec.trainable.num_workers} "
        f"worker(s), use_gpu={spec.trainable.use_gpu}",
        f"searcher       : {spec.searcher_name}    scheduler: {spec.scheduler_name}",
        f"tracking       : {spec.tracking.uri} (experiment {spec.tracking.experiment})",
        f"storage        : {spec.storage_path}",
        "search space   :",
        *(f"  {k}: {json.dumps(v)}" for k, v in spec.space.items()),
        "plan           :",
        *(f"  {line}" for line in plan_text.splitlines()),
    ]
    return "\n".join(lines)


def _git() -> dict[str, str]:
    """The commit of the project the sweep ran from: the cwd's repo, else the one holding the sweeps package."""
    from sweeps import paths

    for folder in (Path.cwd(), paths.PACKAGE_ROOT):
        try:
            sha = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5)
            if sha.returncode != 0:
                continue
            dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain"], capture_output=True,
                                   text=True, timeout=5)
            return {"git_commit": sha.stdout.strip(), "git_dirty": str(bool(dirty.stdout.strip())).lower()}
        except (OSError, subprocess.SubprocessError):
            continue
    return {"git_commit": "unknown", "git_dirty": "unknown"}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python_version": platform.python_version()}
    for pkg in ("ray", "torch", "mlflow", "optuna", "hyperopt"):
        try:
            out[f"{pkg}_version"] = version(pkg)
        except PackageNotFoundError:
            out[f"{pkg}_version"] = "missing"
    return out


def check_storage(spec: SweepSpec) -> None:
    """The storage path must be writable (checked before launch, with a probe file)."""
    path = spec.storage_path
    if "://" in path and not path.startswith("file://"):
        try:
            import pyarrow.fs as pafs

            fs, root = pafs.FileSystem.from_uri(path)
            fs.create_dir(root, recursive=True)
            probe = f"{root.rstrip('/')}/.sweeps-probe"
            with fs.open_output_stream(probe) as f:
                f.write(b"ok")
            fs.delete_file(probe)
        except Exception as exc:
            raise BadInput(f"storage.path: cannot write to {path!r} ({exc})") from None
        return
    folder = Path(path.removeprefix("file://"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_file = folder / f".sweeps-probe-{os.getpid()}"
        probe_file.write_text("ok")
        probe_file.unlink()
    except OSError as exc:
        raise BadInput(f"storage.path: cannot write to {folder} ({exc.strerror}); choose a writable folder "
                       f"with storage.path=...") from None


def check_remote(spec: SweepSpec) -> None:
    """A multi-node sweep needs a tracking server and storage every node can reach."""
    if spec.cluster.mode != "remote":
        return
    if spec.tracking.uri.startswith(("sqlite:", "file:")):
        raise BadInput(f"tracking.uri: {spec.tracking.uri!r} is a local store, but cluster=remote runs trials "
                       f"on other machines; start an MLflow server (mlflow server --backend-store-uri ... "
                       f"--host 0.0.0.0) and set tracking.uri=http://HOST:PORT")


def check_shared_storage(spec: SweepSpec) -> None:
    """On a multi-node cluster, prove that every node sees the storage path (write here, read there)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) <= 1 or "://" in spec.storage_path:
        return
    marker = Path(spec.storage_path) / f".sweeps-shared-{os.getpid()}-{int(time.time())}"
    marker.write_text("shared")

    @ray.remote(num_cpus=0)
    def sees(path: str) -> bool:
        return os.path.isfile(path)

    try:
        refs = {n["NodeID"]: sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(marker)) for n in nodes}
        blind = [nid[:8] for nid, ref in refs.items() if not ray.get(ref, timeout=60)]
    finally:
        marker.unlink(missing_ok=True)
    if blind:
        raise BadInput(f"storage.path: {spec.storage_path} is node-local: node(s) {', '.join(blind)} cannot see "
                       f"it; use a shared filesystem path mounted on every node or an object store URI "
                       f"(s3://bucket/path, gs://...)")


def open_parent(spec: SweepSpec, sweep_id: str, overrides: Sequence[str], schedule: str | None,
                previous: str | None) -> tuple[Any, str, str]:
    """Create the sweep's MLflow experiment and parent run; returns (client, experiment_id, run_id)."""
    import json

    c = tracking.client(spec.tracking.uri)
    exp_id = tracking.get_or_create_experiment(c, spec.tracking.experiment, spec.tracking.uri)
    tags = {
        tracking.TAG_SWEEP: sweep_id, tracking.TAG_KIND: "sweep", tracking.TAG_DRIVER: tracking.driver_id(),
        "experiment": spec.sweep.name, "searcher": spec.searcher_name, "scheduler": spec.scheduler_name,
        "metric": spec.sweep.metric, "mode": spec.sweep.mode, "trainable": spec.trainable.name,
        "config_digest": spec.digest(), **_git(), **_versions(),
    }
    if schedule:
        tags["schedule"] = schedule
    if previous:
        tags["previous_sweep_id"] = previous
    run = c.create_run(exp_id, run_name=sweep_id, tags=tags)
    run_id = run.info.run_id
    tracking.log_params(c, run_id, {"overrides": " ".join(overrides) or "(none)",
                                    "num_samples": spec.sweep.num_samples, "seed": spec.sweep.seed})
    tracking.write_text_artifact(c, run_id, "config.yaml", _yaml(spec.redacted()))
    tracking.write_json_artifact(c, run_id, "search_space.json", spec.space)
    _ = json  # keep import local and explicit for readers
    return c, exp_id, run_id


def _yaml(data: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))


def finish_parent(c: Any, rec: store.SweepRecord, summ: summary.Summary, status: str,
                  mlflow_seconds: float) -> None:
    from mlflow.entities import Metric

    tags: dict[str, Any] = {f"count.{k}": v for k, v in summ.counts.items()}
    metrics = [Metric("sweeps/mlflow_seconds", mlflow_seconds, int(time.time() * 1000), 0)]
    if rec.wall_s is not None:
        metrics.append(Metric("sweeps/wall_s", rec.wall_s, int(time.time() * 1000), 0))
    if summ.best is not None:
        tags.update({"best_trial_id": summ.best.trial_id, "best_metric": summ.best.best,
                     "best_config": summ.best.params})
        metrics.append(Metric(f"best/{summ.metric}", summ.best.best, int(time.time() * 1000), 0))
        best_run = tracking.find_runs(c, [rec.mlflow_experiment_id],
                                      f"tags.`{tracking.TAG_TRIAL}` = '{summ.best.trial_id}' and "
                                      f"tags.`{tracking.PARENT_TAG}` = '{rec.parent_run_id}'")
        if best_run:
            tags["best_run_id"] = best_run[0].info.run_id
            tags["best_checkpoint"] = best_run[0].data.tags.get("best_checkpoint", "")
            c.set_tag(best_run[0].info.run_id, "sweeps.best", "true")
    tracking.set_tags(c, rec.parent_run_id, tags)
    c.log_batch(rec.parent_run_id, metrics=metrics)
    c.set_terminated(rec.parent_run_id, status=status)


class _Signals(logging.Handler):
    """SIGTERM behaves like Ctrl-C: Tune stops gracefully, saves its state, and we close every run.

    Tune handles Ctrl-C itself and returns normally, saying so only in a log line: that line (or our SIGTERM)
    sets ``interrupted``.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.interrupted = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Stop signal received"):
            self.interrupted = True

    def _term(self, *_: object) -> None:
        self.interrupted = True
        os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self) -> _Signals:
        self.prev = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._term)
        logging.getLogger("ray.tune.tune").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGTERM, self.prev)
        logging.getLogger("ray.tune.tune").removeHandler(self)


@contextmanager
def launched(spec: SweepSpec) -> Iterator[tuple[plan.Plan, Any]]:
    """Check everything that can be checked, start (or join) Ray, yield (plan, MLflow client); stop Ray.

    Order matters: the plan and the tracking/storage probes run before anything is written.
    """
    local = spec.cluster.mode == "local"
    pre = plan.make_plan(spec, plan.local_resources(spec), local=True) if local else None
    check_remote(spec)
    tracking.probe(spec.tracking.uri)
    check_storage(spec)
    # Ray's processes (and trainables that keep data under $SWEEPS_HOME) must see the same state folder.
    os.environ["SWEEPS_HOME"] = str(paths.home())
    builtin = ("CPU", "GPU", "memory", "object_store_memory")
    custom = {k: v for k, v in pre.resources.total.items() if k not in builtin} if pre else None
    # Opening the MLflow store (import, SQLAlchemy engine, closing a dead driver's runs: ~1.5 s) overlaps
    # Ray's start-up, which mostly waits on its own processes.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweeps-mlflow") as pool:
        opening = pool.submit(_open_store, spec.tracking.uri)
        raystart.start(spec, pre.num_cpus_to_start if pre else None, custom)
    try:
        c = opening.result()
        the_plan = pre or plan.make_plan(spec, plan.cluster_resources(), local=False)
        if not local:
            check_shared_storage(spec)
        yield the_plan, c
    finally:
        raystart.stop()


def _open_store(uri: str) -> Any:
    c = tracking.client(uri)
    tracking.close_stale_runs(c)
    return c


def execute(spec: SweepSpec, overrides: Sequence[str], *, schedule: str | None = None,
            previous: str | None = None, points: list[dict[str, Any]] | None = None,
            searcher_state_dir: str | None = None) -> Outcome:
    """Run a validated sweep end to end."""
    with launched(spec) as (the_plan, c):
        sweep_id = store.new_sweep_id(spec.sweep.name)
        c, exp_id, parent = open_parent(spec, sweep_id, overrides, schedule, previous)
        rec = store.SweepRecord(
            sweep_id=sweep_id, experiment=spec.sweep.name, created=time.time(), status="running",
            storage_path=spec.storage_path, experiment_dirs=[str(Path(spec.storage_path) / sweep_id)],
            tracking_uri=spec.tracking.uri, mlflow_experiment_id=exp_id, parent_run_id=parent,
            overrides=list(overrides), config=spec.redacted(), digest=spec.digest(), metric=spec.sweep.metric,
            mode=spec.sweep.mode, searcher=spec.searcher_name, scheduler=spec.scheduler_name,
            schedule=schedule, previous_sweep_id=previous, driver_pid=os.getpid(),
            slots=the_plan.concurrent_trials,
        )
        store.save(rec)
        log.info("sweep %s: %s trial(s), %d at a time; results in %s", sweep_id,
                 the_plan.total_trials or "unbounded", the_plan.concurrent_trials, rec.experiment_dir)
        tracker = make_tracker(spec, rec)
        searcher = None
        if searcher_state_dir:
            from sweeps.tuner import count_limit, restored_searcher

            searcher = restored_searcher(spec, count_limit(spec, the_plan) or 0, searcher_state_dir, points)
        from sweeps.tuner import build_tuner

        tuner = build_tuner(spec, the_plan, sweep_id, [tracker], points=points, searcher=searcher)
        return fit_and_finish(spec, rec, tuner, tracker, c)


def make_tracker(spec: SweepSpec, rec: store.SweepRecord) -> Any:
    from sweeps import security

    secrets: set[str] = set()
    security.redact(spec.raw, secrets)
    return tracking.make_callback(
        uri=spec.tracking.uri, experiment_id=rec.mlflow_experiment_id, parent_run_id=rec.parent_run_id,
        sweep_id=rec.sweep_id, metric=spec.sweep.metric, mode=spec.sweep.mode,
        fixed_params=spec.trainable.params, flush_interval_s=spec.tracking.flush_interval_s,
        log_checkpoints=spec.tracking.log_checkpoints, epochs=spec.trainable.epochs,
        secrets=secrets,
    )


def fit_and_finish(spec: SweepSpec, rec: store.SweepRecord, tuner: Any, tracker: Any, c: Any) -> Outcome:
    """Fit; whatever happens, leave every MLflow run final and the index record honest."""
    t0 = time.monotonic()
    status, interrupted = "failed", False
    signals = _Signals()
    try:
        with signals:
            tuner.fit()
        interrupted = signals.interrupted
        status = "interrupted" if interrupted else "finished"
    except KeyboardInterrupt:
        interrupted, status = True, "interrupted"
    finally:
        wall = time.monotonic() - t0 + (rec.wall_s or 0.0)
        tracker.close_open("KILLED")
        records_ = _records(spec, rec, settled=status == "finished")
        summ = summary.collect(records_, spec.sweep.metric, spec.sweep.mode, top_k=spec.report.top_k,
                               max_epochs=spec.trainable.epochs, wall_s=wall, slots=rec.slots)
        budget_hit = spec.sweep.time_budget_s is not None and wall >= spec.sweep.time_budget_s
        if status == "finished" and summ.counts["unfinished"] and not budget_hit:
            interrupted, status = True, "interrupted"  # Tune returns normally after Ctrl-C
        best = {}
        if summ.best is not None:
            best = {"trial_id": summ.best.trial_id, "value": summ.best.best, "params": summ.best.params}
        rec = store.update(rec.sweep_id, status=status, wall_s=wall, best=best, counts=summ.counts)
        mlflow_status = {"finished": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED")
        try:
            finish_parent(c, rec, summ, mlflow_status, tracker.timer.seconds)
        except Exception as exc:
            log.warning("MLflow: could not finish the parent run (%s); `sweeps sync %s` retries", exc,
                        rec.sweep_id)
    out = Outcome(record=rec, summary=summ, interrupted=interrupted)
    raystart.stop_in_background()  # nothing below needs Ray: the report is drawn while it stops
    if spec.report.enabled:
        out.report_paths = _report(rec, records_, summ, spec, c)
    if spec.promote.enabled and status == "finished":
        out.promotion = _promote(rec, spec)
    return out


def _records(spec: SweepSpec, rec: store.SweepRecord, settled: bool) -> list[Any]:
    from sweeps.results import load_records

    try:
        return load_records(rec.experiment_dirs, spec.sweep.metric, spec.sweep.mode, spec.trainable.epochs,
                            settled=settled)
    except Exception as exc:  # a sweep that died before Tune wrote its state has no trials
        log.warning("could not read trial results from %s (%s)", rec.experiment_dirs, exc)
        return []


def _report(rec: store.SweepRecord, records_: list[Any], summ: summary.Summary, spec: SweepSpec,
            c: Any) -> list[str]:
    from sweeps import report

    try:
        out_dir = Path(spec.report.dir) / rec.experiment / rec.sweep_id
        written = report.write_all(rec, records_, summ, out_dir)
        store.update(rec.sweep_id, report_dir=str(out_dir.resolve()))
        try:
            c.log_artifacts(rec.parent_run_id, str(out_dir), artifact_path="report")
        except Exception as exc:
            log.warning("MLflow: could not upload the report (%s)", exc)
        return [str(p) for p in written]
    except Exception as exc:  # a report failure must not lose the sweep
        log.exception("report failed: %s (rebuild with `python -m sweeps report %s`)", exc, rec.sweep_id)
        return []


def _promote(rec: store.SweepRecord, spec: SweepSpec) -> str:
    from sweeps import promote
    from sweeps.errors import GateRefused

    try:
        res = promote.promote(rec.sweep_id, model_name=spec.promote.model_name, alias=spec.promote.alias)
        return str(res)
    except GateRefused as exc:
        return f"not promoted: {exc}"
    except Exception as exc:
        log.warning("auto-promotion failed: %s", exc)
        return f"promotion failed: {exc}"
