"""The baseline: a minimal hand-written Ray Tune + Ray Train V2 sweep of trainables.digits.train_loop.

What an engineer would write without `sweeps`: one Tune function trainable per trial that builds a
TorchTrainer and calls fit(); random search (Tune's BasicVariantGenerator, seeded) over the same space as
`search_spaces/<space>.yaml`; FIFO or ASHA with the same arguments as conf/scheduler/asha.yaml; the same
logical CPUs as `sweeps`' plan ((1 driver + workers) x concurrency); the same Train health-check interval
as sweeps/raystart.py (0.1 s) unless --health-check says otherwise. No MLflow, no report.

Bridge (--bridge): ``callback`` = Ray's own ``TuneReportCallback`` (metrics only; Tune gets no checkpoint),
the minimal script Ray's docs show; ``queue`` = the same UserCallback + 0-CPU queue bridge `sweeps` uses
(docs/ray.md, "The Train -> Tune bridge"), which also hands each checkpoint to Tune (one more copy per epoch).

    python benchmarks/handwritten.py [--trials 6] [--epochs 8] [--workers 2] [--concurrency 2] [--seed 0]
        [--scheduler fifo|asha] [--space digits_small|digits] [--bridge callback|queue] [--health-check 0.1]
        [--storage DIR] [--param key=value ...]

Prints one line ``HANDWRITTEN {json}`` with the fit wall time, total time and the per-trial results.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from typing import Any

T_PROCESS = time.perf_counter()

# Same domains, same key order as search_spaces/*.yaml: BasicVariantGenerator then samples the same configs.
SPACES: dict[str, dict[str, tuple[str, Any]]] = {
    "digits_small": {"lr": ("loguniform", (1e-3, 1e-1)), "hidden_size": ("choice", [64, 128]),
                     "batch_size": ("choice", [32, 64])},
    "digits": {"lr": ("loguniform", (1e-4, 1e-1)), "hidden_size": ("choice", [32, 64, 128]),
               "weight_decay": ("loguniform", (1e-6, 1e-2)), "batch_size": ("choice", [32, 64, 128])},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", choices=("fifo", "asha"), default="fifo")
    p.add_argument("--space", choices=tuple(SPACES), default="digits_small")
    p.add_argument("--bridge", choices=("callback", "queue"), default="callback")
    p.add_argument("--health-check", type=float, default=0.1, help="RAY_TRAIN_HEALTH_CHECK_INTERVAL_S")
    p.add_argument("--storage", default=None, help="Ray results folder (default: a temp dir)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="fixed setting for train_loop (int/float/str); a sampled key of the same name wins")
    return p.parse_args(argv)


def fixed_params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        value: Any = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        out[key] = value
    return out


def param_space(name: str, drop: set[str]) -> dict[str, Any]:
    from ray import tune

    out: dict[str, Any] = {}
    for key, (dist, arg) in SPACES[name].items():
        if key in drop:  # fixed with --param instead
            continue
        out[key] = tune.loguniform(*arg) if dist == "loguniform" else tune.choice(list(arg))
    return out


def train_driver(config: dict[str, Any], settings: dict[str, Any]) -> None:
    """The Tune function trainable: one TorchTrainer per trial."""
    import ray.train
    import ray.tune
    from ray.train.torch import TorchTrainer

    from trainables.digits import train_loop

    trial_id = ray.tune.get_context().get_trial_id()
    loop_config = {**settings["params"], "epochs": settings["epochs"], "seed": settings["seed"], **config}
    callbacks: list[Any] = []
    queue = None
    if settings["bridge"] == "callback":
        from ray.tune.integration.ray_train import TuneReportCallback

        callbacks.append(TuneReportCallback())
    else:
        from ray.util.queue import Queue

        queue = Queue(actor_options={"num_cpus": 0})
        callbacks.append(_queue_bridge(queue))
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=loop_config,
        scaling_config=ray.train.ScalingConfig(num_workers=settings["workers"],
                                               resources_per_worker={"CPU": 1}),
        run_config=ray.train.RunConfig(name=f"{trial_id}-{uuid.uuid4().hex[:6]}",
                                       storage_path=settings["train_dir"], callbacks=callbacks,
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)),
    )
    if queue is None:
        trainer.fit()
        return
    _fit_bridged(trainer, queue)


def _queue_bridge(queue: Any) -> Any:
    from ray.train.v2.api.callback import UserCallback

    class Bridge(UserCallback):  # type: ignore[misc]
        def __init__(self, q: Any) -> None:
            self.q = q

        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            self.q.put((dict(metrics[0]), checkpoint))

    return Bridge(queue)


def _fit_bridged(trainer: Any, queue: Any) -> None:
    """fit() in a thread; this thread re-reports each (metrics, checkpoint) to Tune."""
    import ray.tune
    from ray.util.queue import Empty

    errors: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()

    def forward(item: tuple[dict[str, Any], Any]) -> None:
        metrics, ck = item
        ray.tune.report(metrics, checkpoint=ray.tune.Checkpoint(ck.path, ck.filesystem) if ck else None)

    while thread.is_alive() or not queue.empty():
        try:
            forward(queue.get(timeout=0.25))
        except Empty:
            continue
    thread.join()
    if errors:
        raise errors[0]


def build_tuner(args: argparse.Namespace, storage: str) -> Any:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    params = fixed_params(args.param)
    settings = {"epochs": args.epochs, "seed": args.seed, "workers": args.workers, "bridge": args.bridge,
                "params": params, "train_dir": os.path.join(storage, "train")}
    scheduler = (ASHAScheduler(time_attr="training_iteration", max_t=args.epochs, grace_period=2,
                               reduction_factor=2, brackets=1)
                 if args.scheduler == "asha" else FIFOScheduler())
    driver = tune.with_resources(tune.with_parameters(train_driver, settings=settings), {"cpu": 1})
    return tune.Tuner(
        driver,
        param_space=param_space(args.space, set(params)),
        tune_config=tune.TuneConfig(
            metric="val/acc", mode="max", num_samples=args.trials, scheduler=scheduler,
            # An instance ignores max_concurrent_trials (docs/ray.md): it gets its own limit.
            search_alg=BasicVariantGenerator(random_state=args.seed, max_concurrent=args.concurrency),
            max_concurrent_trials=args.concurrency,
        ),
        run_config=tune.RunConfig(name="handwritten", storage_path=storage, verbose=1,
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=2)),
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = str(args.health_check)  # before ray.init (docs/ray.md)
    import ray

    storage = args.storage or tempfile.mkdtemp(prefix="handwritten-")
    t_init = time.perf_counter()
    ray.init(num_cpus=(1 + args.workers) * args.concurrency, log_to_driver=False)
    t_fit = time.perf_counter()
    results = build_tuner(args, storage).fit()
    fit_s = time.perf_counter() - t_fit
    trials = []
    for r in results:
        df = r.metrics_dataframe
        accs = list(df["val/acc"]) if df is not None and "val/acc" in df else []
        trials.append({"epochs": len(accs), "best": max(accs) if accs else None, "config": r.config})
    ray.shutdown()
    out = {"fit_s": fit_s, "init_s": t_fit - t_init, "before_init_s": t_init - T_PROCESS,
           "total_s": time.perf_counter() - T_PROCESS,
           "storage": storage, "trials": trials}
    print("HANDWRITTEN " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
