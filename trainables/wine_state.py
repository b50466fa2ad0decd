"""An example trainable with its own checkpoint layout: a wine classifier whose checkpoint is one ``state.pt``.

Nothing here uses the common layout (``model.pt``/``optimizer.pt``/``meta.json``): each checkpoint is a single
``torch.save`` of ``{"model", "optimizer", "epoch", "scaler": {"mean", "std"}, "columns", "labels"}`` (tensors,
numbers and strings only, so ``torch.load(weights_only=True)`` reads it). Promotion reads it through this
module's :func:`load_model`, named by ``trainable.load_model`` in ``conf/trainable/wine_state.yaml``: that hook
is the whole contract between a checkpoint layout and the registry.

Data: scikit-learn's wine (13 features on very different scales, 3 classes), a fixed stratified split. The
network trains on standardized features; the scaler is saved in ``state.pt`` and put back in front of the
network by :func:`load_model`, so the registered model takes raw rows and answers with the class name.

Reports ``train/loss``, ``val/loss``, ``val/acc``, ``epoch``, ``opt/lr`` every epoch.
"""

from __future__ import annotations

import os
from typing import Any

from trainables import common, preemption

METRICS = ("train/loss", "val/loss", "val/acc", "epoch", "opt/lr")
STATE_FILE = "state.pt"


def split(seed: int = 0, val_fraction: float = 0.25) -> dict[str, Any]:
    """Raw wine rows on a fixed stratified split, the training split's mean/std, column and class names."""
    import numpy as np
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    bunch = load_wine()
    x_tr, x_va, y_tr, y_va = train_test_split(bunch.data, bunch.target, test_size=val_fraction,
                                              random_state=seed, stratify=bunch.target)
    std = x_tr.std(axis=0)
    std[std == 0] = 1.0
    return {"x_tr": x_tr, "y_tr": y_tr.astype(np.int64), "x_va": x_va, "y_va": y_va.astype(np.int64),
            "mean": x_tr.mean(axis=0), "std": std, "columns": [str(c) for c in bunch.feature_names],
            "labels": [str(c) for c in bunch.target_names]}


def build_model(config: dict[str, Any]) -> Any:
    """13 standardized features -> hidden -> 3 logits."""
    from torch import nn

    hidden = int(config.get("hidden_size", 32))
    return nn.Sequential(nn.Linear(13, hidden), nn.ReLU(), nn.Linear(hidden, 3))


def save_state(directory: str, model: Any, optimizer: Any, epoch: int, data: dict[str, Any]) -> None:
    """This trainable's checkpoint: everything in one ``state.pt``."""
    import torch

    raw = model.module if hasattr(model, "module") else model
    torch.save({"model": raw.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "scaler": {"mean": torch.as_tensor(data["mean"]), "std": torch.as_tensor(data["std"])},
                "columns": data["columns"], "labels": data["labels"]}, os.path.join(directory, STATE_FILE))


def read_state(directory: str) -> dict[str, Any]:
    """``state.pt`` of a checkpoint folder (``weights_only``: it never runs code)."""
    import torch

    path = os.path.join(directory, STATE_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {directory} has no {STATE_FILE} (wine_state's layout)")
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """Promotion's hook: ``state.pt`` -> the network behind its scaler, with the column and class names."""
    state = read_state(checkpoint_dir)
    net = build_model(config)
    net.load_state_dict(state["model"])
    module = common.standardized(net.eval(), state["scaler"]["mean"], state["scaler"]["std"])
    return common.ServableModel(module=module, task="classification", columns=tuple(state["columns"]),
                                labels=tuple(state["labels"]))


def validation_data() -> tuple[Any, Any]:
    """Raw held-out rows (N, 13) as scikit-learn gives them, and their class indices (N,)."""
    data = split()
    return data["x_va"], data["y_va"]


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker: mini-batch AdamW on this worker's share of the rows; rank 0 checkpoints."""
    import ray.train
    import ray.train.torch
    import torch

    common.check_knobs(config)
    common.set_threads(config)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(int(config.get("seed", 0)))
    data = split()
    mean, std = torch.as_tensor(data["mean"]), torch.as_tensor(data["std"])
    x_tr = ((torch.as_tensor(data["x_tr"]) - mean) / std).float()[rank::world]  # this worker's rows
    y_tr = torch.as_tensor(data["y_tr"])[rank::world]
    x_va = ((torch.as_tensor(data["x_va"]) - mean) / std).float()
    y_va = torch.as_tensor(data["y_va"])

    model = build_model(config)
    lr = common.effective_lr(config, world)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=float(config.get("weight_decay", 0.0)))
    start = 1
    ckpt = common.resume_checkpoint(config)
    spot = preemption.Watch.start(None, config.get(common.TRIAL_ID_KEY))
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = read_state(d)
            spot = preemption.Watch.start(d, config.get(common.TRIAL_ID_KEY))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"]) + 1
    common.apply_hparams(optimizer, lr)
    model = ray.train.torch.prepare_model(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = int(config.get("batch_size", 16))
    for epoch in range(start, int(config.get("epochs", 5)) + 1):
        model.train()
        order = torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(epoch))
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            loss = loss_fn(model(x_tr[idx]), y_tr[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
        model.eval()
        with torch.no_grad():
            out = model(x_va)
        metrics = {"train/loss": total / max(len(y_tr), 1), "val/loss": float(loss_fn(out, y_va)),
                   "val/acc": float((out.argmax(1) == y_va).float().mean()), "epoch": epoch,
                   "opt/lr": optimizer.param_groups[0]["lr"]}
        with common.checkpoint_dir(rank, epoch, int(config.get("checkpoint_every", 1)), spot) as d:
            checkpoint = None
            if d is not None:
                save_state(d, model, optimizer, epoch, data)
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report({**metrics, **spot.metrics(epoch)}, checkpoint=checkpoint)
