"""The per-trial Tune function: builds one Ray Train ``TorchTrainer`` and bridges it to Tune.

Train V2 checkpoints are not Tune checkpoints. The bridge (docs/ray.md, "The Train -> Tune bridge"): a Train
``UserCallback`` in the controller forwards rank 0's ``(metrics, checkpoint)`` through a 0-CPU queue; this
driver re-reports each with ``ray.tune.report(..., checkpoint=ray.tune.Checkpoint(...))``. So PBT can exploit,
Tune can retry and resume, and a trial's Tune checkpoint (the PBT donor's, a retry's, a resume's) is handed to
the workers through ``train_loop_config["_resume_from"]``. The Train run gets a unique name per start, or
Train V2 would auto-resume from its own latest checkpoint and override the donor's.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from sweeps import uris
from sweeps.config.targets import import_dotted

log = logging.getLogger(__name__)

RESUME_KEY = "_resume_from"  # same key as trainables.common.RESUME_KEY
NONFINITE_FLAG = "sweeps/nonfinite"


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


def _bridge_callback(queue: Any) -> Any:
    from ray.train.v2.api.callback import UserCallback

    class Bridge(UserCallback):  # type: ignore[misc]
        """Runs in the Train controller: forwards rank 0's metrics and the persisted checkpoint."""

        def __init__(self, q: Any) -> None:
            self.q = q

        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            self.q.put((dict(metrics[0]), checkpoint))

    return Bridge(queue)


def loop_config(config: dict[str, Any], setup: TrialSetup, start: Any, trial_id: str) -> dict[str, Any]:
    """What every Train worker's ``train_loop`` gets: fixed params, the trial's sample, and the bridge's keys."""
    return {
        **setup.params,
        **setup.extra_config,
        **config,
        "cpus_per_worker": setup.resources_per_worker.get("CPU", 1),
        "checkpoint_every": setup.checkpoint_every,
        RESUME_KEY: uris.to_uri(start.path, start.filesystem) if start is not None else None,
        "_trial_id": trial_id,
    }


def make_trainer(setup: TrialSetup, config: dict[str, Any], trial_id: str, queue: Any) -> Any:
    """One TorchTrainer for one (re)start of the trial, reporting through the bridge's queue."""
    import ray.train
    from ray.train.torch import TorchTrainer

    from sweeps.execution.loopback import torch_config

    # Ray Data: datasets are built here, in the trial's driver; Train shards them across the workers
    # (each worker reads its shard with ray.train.get_dataset_shard(name)).
    datasets = import_dotted(setup.datasets)(config) if setup.datasets else None
    return TorchTrainer(
        import_dotted(setup.loop),
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
            name=f"{trial_id}-{uuid.uuid4().hex[:6]}",
            storage_path=setup.train_dir,
            callbacks=[_bridge_callback(queue)],
            # A finite controller_failure_limit: the default (-1) retries worker start-up forever (docs/ray.md).
            failure_config=ray.train.FailureConfig(max_failures=setup.worker_max_failures,  # type: ignore[call-arg]
                                                   controller_failure_limit=3),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=None),  # Tune may still copy older ones (S3)
        ),
    )


def pump(queue: Any, thread: threading.Thread, setup: TrialSetup) -> None:
    """Re-report every (metrics, checkpoint) the controller sends until ``fit()`` has ended and all is drained."""
    import ray.tune
    from ray.util.queue import Empty

    def forward(item: tuple[dict[str, Any], Any]) -> None:
        metrics, ckpt = item
        metrics = sanitize(metrics, setup.metric, setup.mode)
        tune_ckpt = ray.tune.Checkpoint(ckpt.path, ckpt.filesystem) if ckpt is not None else None
        ray.tune.report(metrics, checkpoint=tune_ckpt)

    while True:
        try:
            forward(queue.get(timeout=0.25))
            continue
        except Empty:
            pass
        if thread.is_alive():
            continue
        while not queue.empty():  # fit() ended: drain what the controller put last
            forward(queue.get_nowait())
        return


def run_trial(config: dict[str, Any], setup: TrialSetup) -> None:
    """Tune function trainable: one TorchTrainer per (re)start of the trial."""
    import ray
    import ray.tune
    from ray.util.queue import Queue

    start = ray.tune.get_checkpoint()
    trial_id = ray.tune.get_context().get_trial_id()
    queue = Queue(actor_options={"num_cpus": 0})  # 0 CPU: it must not eat the trial's placement group
    trainer = make_trainer(setup, loop_config(config, setup, start, trial_id), trial_id, queue)
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:  # re-raised below, in the trial's own thread
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name=f"fit-{trial_id}", daemon=True)
    thread.start()
    pump(queue, thread, setup)
    thread.join()
    try:
        ray.kill(queue.actor)  # type: ignore[arg-type]
    except Exception:  # best effort: the actor dies with the trial anyway
        pass
    if "error" in outcome:
        raise outcome["error"]
