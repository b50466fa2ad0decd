"""One data-parallel training loop for in-memory tensor datasets, shared by the bundled trainables."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainables import common, preemption


@dataclass(frozen=True)
class ClassificationTask:
    """Cross-entropy; reports ``val/acc``."""

    def loss_fn(self) -> Any:
        import torch

        return torch.nn.CrossEntropyLoss()

    def score(self, out: Any, y: Any) -> float:
        """Sum of correct predictions in the batch."""
        return float((out.argmax(1) == y).sum())

    name = "val/acc"


@dataclass(frozen=True)
class RegressionTask:
    """Mean squared error; reports ``val/rmse``."""

    def loss_fn(self) -> Any:
        import torch

        return torch.nn.MSELoss()

    def score(self, out: Any, y: Any) -> float:
        """Sum of squared errors in the batch."""
        return float(((out - y) ** 2).sum())

    name = "val/rmse"


Task = ClassificationTask | RegressionTask


def fit(config: dict[str, Any], load_data: Callable[[], tuple[Any, Any, Any, Any]],
        build_model: Callable[[dict[str, Any]], Any], task: Task,
        preprocessing: Callable[[], dict[str, Any]] | None = None) -> None:
    """Train ``build_model(config)`` on ``load_data()`` with Ray Train; report each epoch.

    Honors the shared knobs: ``batch_size``, ``lr`` (+ ``scale_lr``), ``weight_decay``, ``epochs``,
    ``grad_accum_steps``, ``checkpoint_every``, ``torch_threads``, and, for the fault-tolerance tests, fault
    injection (``fault``, ``fault_epoch``) and ``epoch_sleep_s`` (each epoch that much longer without using a
    CPU: a test that acts mid-trial gets its window without a bigger model). ``preprocessing()`` (JSON: e.g.
    the scaler statistics ``load_data`` applied) is saved in every checkpoint, so a promoted model can take raw
    inputs. The first report of each start also says where every worker trained and over which backend
    (``sys/workers``, ``sys/backend``: :func:`trainables.common.worker_facts`).
    """
    import ray
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    common.set_threads(config)
    node_id = ray.get_runtime_context().get_node_id()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(int(config.get("seed", 0)) + rank)

    x_tr, y_tr, x_va, y_va = load_data()
    batch_size = int(config.get("batch_size", 64))
    # prepare_data_loader adds a DistributedSampler: each worker iterates its own shard.
    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(x_tr, y_tr), batch_size=batch_size, shuffle=True)
    )
    model = ray.train.torch.prepare_model(build_model(config))
    device = ray.train.torch.get_device()
    x_va, y_va = x_va.to(device), y_va.to(device)
    lr = common.effective_lr(config, world)
    weight_decay = float(config.get("weight_decay", 0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    accum = common.accumulation_steps(config)
    loss_fn = task.loss_fn()

    start_epoch = 1
    restored: dict[str, Any] = {}
    ckpt = common.resume_checkpoint(config)
    spot = preemption.Watch.start(None, config.get(common.TRIAL_ID_KEY))
    if ckpt is not None:
        with ckpt.as_directory() as d:
            model_state, optim_state, meta = common.load_checkpoint(d)
            spot = preemption.Watch.start(d, config.get(common.TRIAL_ID_KEY))
        raw: Any = model.module if hasattr(model, "module") else model
        raw.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)
        start_epoch = int(meta["epoch"]) + 1
        # Reported once, with the first epoch after a restore: who wrote the checkpoint (PBT donor?) and when.
        restored = {"restored_from": str(meta.get("trial_id", "")), "restored_epoch": int(meta["epoch"])}
    # After a restore the optimizer holds the donor's lr: the trial's own (possibly mutated) values win.
    common.apply_hparams(optimizer, lr, weight_decay)
    # Reported once per start, with the first epoch: every worker's device and the process group's backend.
    facts = common.worker_facts(model, rank, ctx.get_local_rank())

    epochs = int(config.get("epochs", 10))
    every = int(config.get("checkpoint_every", 1))
    fault, fault_epoch = str(config.get("fault", "none")), int(config.get("fault_epoch", 2))
    sleep_s = float(config.get("epoch_sleep_s", 0.0))
    for epoch in range(start_epoch, epochs + 1):
        sampler: Any = getattr(train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        model.train()
        watch = common.Stopwatch()
        total, count = 0.0, 0
        for step, (xb, yb) in enumerate(train_loader):
            watch.data_done()
            loss = loss_fn(model(xb), yb) / accum  # xb: (B, F) -> out (B, C) or (B,)
            loss.backward()
            if (step + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            total += float(loss.detach()) * accum * len(yb)
            count += len(yb)
            watch.compute_done()
        if sleep_s > 0:
            time.sleep(sleep_s)
        optimizer.step()  # flush a partial accumulation window
        optimizer.zero_grad()

        model.eval()
        with torch.no_grad():
            latency_ms = common.latency_ms(lambda: model(x_va))
            out = model(x_va)
            sums = torch.tensor(
                [float(loss_fn(out, y_va)) * len(y_va), task.score(out, y_va), len(y_va), total, count],
                dtype=torch.float64,
            )
        if dist.is_available() and dist.is_initialized():
            sums = sums.to(device)
            dist.all_reduce(sums)  # sums over workers; the ratios below are unchanged
            sums = sums.cpu()
        val_loss = float(sums[0] / sums[2])
        score = float(sums[1] / sums[2])
        if isinstance(task, RegressionTask):
            score = math.sqrt(score)
        train_loss = float(sums[3] / max(float(sums[4]), 1.0))

        if fault == "raise" and epoch == fault_epoch:
            raise RuntimeError(f"injected fault at epoch {epoch} (fault=raise)")
        if fault == "raise_once" and epoch == fault_epoch and ckpt is None:
            raise RuntimeError(f"injected one-off fault at epoch {epoch} (fault=raise_once)")
        if fault == "nan" and epoch >= fault_epoch:
            val_loss, score = math.nan, math.nan

        metrics = {
            "train/loss": train_loss,
            "val/loss": val_loss,
            task.name: score,
            "epoch": epoch,
            "opt/lr": optimizer.param_groups[0]["lr"],
            "model/params": common.parameter_count(model),
            "model/latency_ms": latency_ms,
            **watch.metrics(),
            **restored,
            **facts,
            "node_id": node_id,  # where rank 0 ran (multi-node placement shows in the results)
        }
        restored, facts = {}, {}
        with common.checkpoint_dir(rank, epoch, every, spot) as d:
            checkpoint = None
            if d is not None:
                common.save_checkpoint(d, model, optimizer, {"epoch": epoch, "lr": lr, task.name: score,
                                                           "trial_id": config.get(common.TRIAL_ID_KEY)})
                if preprocessing is not None:
                    common.save_preprocessing(d, preprocessing())
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report({**metrics, **spot.metrics(epoch)}, checkpoint=checkpoint)
