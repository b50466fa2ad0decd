"""The per-trial Tune function: builds one Ray Train ``TorchTrainer`` and bridges it to Tune.

Train V2 checkpoints are not Tune checkpoints. The bridge (docs/ray.md, "The Train -> Tune bridge"): a Train
``UserCallback`` in the controller sends rank 0's ``(metrics, checkpoint)`` over a private socket
(``sweeps.execution.train.bridge``) and waits; this driver re-reports each with ``ray.tune.report(...,
checkpoint=...)``, which copies the checkpoint into the trial's folder, then acks. So PBT can exploit, Tune can
retry and resume, and Train (keeping one checkpoint) never deletes one Tune has not copied yet. A trial's Tune
checkpoint (the PBT donor's, a retry's, a resume's) seeds the Train run, so ``ray.train.get_checkpoint()``
returns it on every worker; it is also in ``train_loop_config["_resume_from"]`` (a URI) for older loops. The
Train run gets a unique name per start, and its folder is deleted when ``fit()`` ends (Tune holds copies).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sweeps import uris
from sweeps.config.targets import import_dotted
from sweeps.execution.train import bridge, inprocess, pins, stages, startup

log = logging.getLogger(__name__)

RESUME_KEY = "_resume_from"  # same key as trainables.common.RESUME_KEY
NONFINITE_FLAG = "sweeps/nonfinite"
TRAIN_KEEP = 1  # Train's own checkpoints per run: the bridge's ack makes its latest the only one Tune may need


@dataclass(frozen=True)
class TrialSetup:
    """What every trial's driver needs; plain data, pickled into the trial actor."""

    loop: str
    params: dict[str, Any]
    num_workers: int
    use_gpu: bool
    resources_per_worker: dict[str, float]
    placement_strategy: str
    storage_path: str
    train_dir: str
    worker_max_failures: int
    metric: str
    mode: str
    checkpoint_every: int
    extra_config: dict[str, Any] = field(default_factory=dict)
    datasets: str | None = None  # dotted path: build_datasets(config) -> {name: ray.data.Dataset}
    sweep_id: str = ""
    lean: bool = False  # the lean trainer (sweeps.execution.warmstart.lean); the installed Ray was checked for it
    in_process: bool = False  # the loop runs in the trial's own process (Train's local mode, the local_train lever)
    job_env_vars: dict[str, str] | None = None  # a remote job's runtime-env variables; None: inherited
    max_preemption_failures: int = -1  # Train's restarts after a node preemption (failure.max_preemption_failures)
    preemption_grace_s: float = 0.0  # failure.preemption_grace_s


def sanitize(metrics: dict[str, Any], metric: str, mode: str) -> dict[str, Any]:
    """Replace a NaN/inf sweep metric with the worst finite value, and flag it.

    Schedulers and checkpoint ranking must keep working, and a diverged trial must never be "best".
    The raw value stays visible as ``<metric>/raw`` (NaN) and ``sweeps/nonfinite`` = 1.
    """
    value = metrics.get(metric)
    if not isinstance(value, int | float) or math.isfinite(value):
        return metrics
    out = dict(metrics)
    out[f"{metric}/raw"] = float("nan")
    out[metric] = 1e30 if mode == "min" else -1e30
    out[NONFINITE_FLAG] = 1.0
    return out


def loop_config(config: dict[str, Any], setup: TrialSetup, start: Any, trial_id: str,
                seed: Any = None, run_name: str = "") -> dict[str, Any]:
    """What every Train worker gets: fixed params, the trial's sample, and the bridge's keys.

    ``start`` is the checkpoint Tune handed the trial; ``seed`` the copy of it to seed the Train run with (a
    pinned PBT donor's, see ``sweeps.execution.tuning.keeper``). The seeding keys are popped before the user's loop.
    """
    seed = seed if seed is not None else start
    return {
        **setup.params,
        **setup.extra_config,
        **config,
        "cpus_per_worker": setup.resources_per_worker.get("CPU", 1),
        "checkpoint_every": setup.checkpoint_every,
        RESUME_KEY: uris.to_uri(seed.path, seed.filesystem) if seed is not None else None,
        "_trial_id": trial_id,
        bridge.SEED_CONFIG: seed,
        bridge.RUN_DIR_CONFIG: uris.join(setup.train_dir, run_name) if run_name else None,
        bridge.LOOP_CONFIG: setup.loop,
    }


def trainer_class(setup: TrialSetup, trial_id: str, run_name: str) -> tuple[type, list[Any]]:
    """The lean trainer and its placement-group name, when the sweep may use it; else Ray's own TorchTrainer.

    The lean trainer needs every variable Train would hand its processes to reach them through the job
    already; anything else (a variable set in this process only) keeps Train's own path.
    """
    from ray.train.torch import TorchTrainer

    if not setup.lean:
        return TorchTrainer, []
    from sweeps.execution.levers import lean_trainer
    from sweeps.execution.warmstart import reaper

    added = lean_trainer.added_env(setup.job_env_vars)
    if added:
        log.info("trial %s: Train's own start-up (it would add %s to its processes)", trial_id, ", ".join(added))
        return TorchTrainer, []
    reaper.free_earlier_runs(setup.sweep_id, trial_id)
    return lean_trainer.trainer(reaper.pg_name(setup.sweep_id, trial_id, run_name))


def make_trainer(setup: TrialSetup, config: dict[str, Any], run_name: str, channel: bridge.Channel) -> Any:
    """One TorchTrainer for one (re)start of the trial, reporting through the bridge's channel."""
    import ray
    import ray.train

    from sweeps.execution.cluster.loopback import torch_config

    trainer_cls, named = trainer_class(setup, str(config.get("_trial_id")), run_name)
    driver_node = ray.get_runtime_context().get_node_id()  # this trial's driver: its controller must run here
    # Ray Data: datasets are built here, in the trial's driver; Train shards them across the workers
    # (each worker reads its shard with ray.train.get_dataset_shard(name)).
    datasets = import_dotted(setup.datasets)(config) if setup.datasets else None
    return trainer_cls(
        bridge.seeded_loop,
        train_loop_config=config,
        datasets=datasets,
        torch_config=torch_config(),  # a 127.0.0.1-only rendezvous on a loopback-only (embedded) Ray
        scaling_config=ray.train.ScalingConfig(
            num_workers=setup.num_workers,
            use_gpu=setup.use_gpu,
            resources_per_worker=dict(setup.resources_per_worker),
            placement_strategy=setup.placement_strategy,
        ),
        run_config=ray.train.RunConfig(
            name=run_name,
            storage_path=setup.train_dir,
            callbacks=[bridge.bridge_callback(channel.address, channel.token, driver_node=driver_node), *named,
                       *stages.train_callbacks()],
            failure_config=failure_config(setup.worker_max_failures, setup.max_preemption_failures,
                                          setup.preemption_grace_s),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=TRAIN_KEEP),
        ),
    )


CONTROLLER_FAILURE_LIMIT = 3


PREEMPTION_PARAMS = ("max_preemption_failures", "preemption_grace_s")


def preemption_params() -> tuple[str, ...]:
    """Which of Train's preemption parameters the installed ``ray.train.FailureConfig`` takes (Ray 2.60 has
    both; older Rays of the supported range have neither): public API, read from its signature."""
    import inspect

    import ray.train

    taken = inspect.signature(ray.train.FailureConfig).parameters
    return tuple(p for p in PREEMPTION_PARAMS if p in taken)


def preemption_not_applied(max_preemption_failures: int, preemption_grace_s: float) -> str | None:
    """What the sweep says once (driver side) when the installed Train lacks a preemption parameter the
    config sets away from Train's default, else None."""
    missing = [p for p in PREEMPTION_PARAMS if p not in preemption_params()]
    if not missing:
        return None
    import ray

    return (f"Ray {ray.__version__}'s Train has no {' or '.join(missing)}: failure.max_preemption_failures="
            f"{max_preemption_failures} and failure.preemption_grace_s={preemption_grace_s:g} are not applied (a "
            f"node preemption there is a worker failure, counted against failure.worker_max_failures)")


def failure_config(worker_max_failures: int, max_preemption_failures: int = -1,
                   preemption_grace_s: float = 0.0) -> Any:
    """Train's failure config: worker-group restarts, a finite ``controller_failure_limit`` (a DeveloperAPI
    argument; Train's default -1 retries a worker group that cannot start forever, docs/ray.md), and the
    preemption budget and grace (counted apart from ``max_failures``), each where the installed Train takes it."""
    import inspect

    import ray.train

    kwargs: dict[str, Any] = {"max_failures": worker_max_failures}
    offered = {"max_preemption_failures": max_preemption_failures, "preemption_grace_s": preemption_grace_s}
    kwargs.update({p: offered[p] for p in preemption_params()})
    if "controller_failure_limit" in inspect.signature(ray.train.FailureConfig).parameters:
        kwargs["controller_failure_limit"] = CONTROLLER_FAILURE_LIMIT
    else:
        log.info("this Ray Train has no controller_failure_limit: a worker group that cannot start is retried "
                 "until its trial is stopped")
    return ray.train.FailureConfig(**kwargs)


class ToTune:
    """Hands each (metrics, checkpoint) of one trial start to Tune: the sweep metric sanitized, the start's clock
    on the first report (:mod:`sweeps.execution.train.startup`; ``fit_called``: when ``fit()`` was called).
    ``ray.tune.report`` returns once Tune has copied the checkpoint and taken the result."""

    def __init__(self, setup: TrialSetup, trial_id: str, fit_called: float | None) -> None:
        self.setup, self.trial_id, self.fit_called = setup, trial_id, fit_called
        self.reported = False

    def __call__(self, metrics: dict[str, Any], ckpt: Any) -> None:
        import ray.tune

        metrics = sanitize(metrics, self.setup.metric, self.setup.mode)
        tune_ckpt = ray.tune.Checkpoint(ckpt.path, ckpt.filesystem) if ckpt is not None else None
        if not self.reported:
            self.reported = True
            stages.stamp(self.trial_id, "first_report")
            metrics = _with_clock(metrics, self.fit_called)
        ray.tune.report(metrics, checkpoint=tune_ckpt)


def pump(channel: bridge.Channel, thread: threading.Thread, setup: TrialSetup, trial_id: str,
         fit_called: float | None = None) -> int:
    """Re-report every (metrics, checkpoint) the controller sends, ack each, until ``fit()`` has ended.

    Returns how many checkpoints were forwarded; only once Tune has taken one is the controller let go on.
    """
    to_tune, forwarded = ToTune(setup, trial_id, fit_called), 0
    while True:
        item = channel.receive(timeout=0.25)
        if item is None:
            if thread.is_alive():
                continue
            item = channel.receive(timeout=0.0)  # fit() ended: whatever was sent last
            if item is None:
                return forwarded
        metrics, ckpt = item
        to_tune(metrics, ckpt)
        forwarded += ckpt is not None
        channel.ack()


def _with_clock(metrics: dict[str, Any], fit_called: float | None) -> dict[str, Any]:
    points = {"report": time.time()}
    if fit_called is not None:
        points["fit"] = fit_called
    waited = startup.pg_wait_s()
    if waited is not None:
        points["pg_wait_s"] = waited
    return startup.add(metrics, **points)


def trial_folder(ctx: Any, storage_path: str) -> str:
    """The trial's folder in storage, from Tune's public context: ``<storage>/<experiment>/<trial dir name>``
    (the trial's working directory, ``get_trial_dir()``, is named after its folder)."""
    return uris.join(storage_path, ctx.get_experiment_name(), os.path.basename(ctx.get_trial_dir().rstrip("/")))


def run_trial(config: dict[str, Any], setup: TrialSetup) -> None:
    """Tune function trainable: one TorchTrainer per (re)start of the trial."""
    import ray.tune

    ctx = ray.tune.get_context()
    trial_id = ctx.get_trial_id()
    stages.stamp(trial_id, "trial_up")
    start = ray.tune.get_checkpoint()
    seed = pins.seed_for(start, trial_folder(ctx, setup.storage_path))
    if setup.in_process:
        inprocess.run(loop_config(config, setup, start, trial_id, seed), setup, seed,
                      lambda fit_called: ToTune(setup, trial_id, fit_called))
        return
    run_name = f"{trial_id}-{uuid.uuid4().hex[:6]}"
    channel = bridge.Channel()
    trainer = make_trainer(setup, loop_config(config, setup, start, trial_id, seed, run_name), run_name,
                           channel)
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:  # re-raised below, in the trial's own thread
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name=f"fit-{trial_id}", daemon=True)
    fit_called = time.time()
    thread.start()
    try:
        pump(channel, thread, setup, trial_id, fit_called)
    finally:
        # Tune stopping the trial raises out of ray.tune.report: closing the channel makes the controller
        # end its run at its next report, so a reused trial actor is left with no Train run behind.
        channel.close()
        thread.join(timeout=None if "error" in outcome or not thread.is_alive() else 5.0)
        location = uris.join(setup.train_dir, run_name)
        if thread.is_alive():  # a reused trial actor lives on: its run's folder goes once the run has ended
            threading.Thread(target=_delete_when_ended, args=(thread, location), name=f"drop-{run_name}",
                             daemon=True).start()
        else:
            _delete_train_run(location)
    if "error" in outcome:
        raise outcome["error"]


def _delete_when_ended(thread: threading.Thread, location: str) -> None:
    thread.join()
    _delete_train_run(location)


def _delete_train_run(location: str) -> None:
    """Train's copy of every checkpoint is in Tune's trial folder by now (each was acked): drop Train's."""
    t0 = time.monotonic()
    try:
        uris.delete_dir(location)
    except Exception as exc:  # best effort: the experiment-end sweep deletes what is left
        log.warning("could not delete the Train run folder %s (%s)", location, exc)
    log.debug("deleted %s in %.2f s", location, time.monotonic() - t0)
