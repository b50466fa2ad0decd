"""A training loop written the way the Ray Train docs teach it, with nothing from this project.

A small MLP on scikit-learn's wine data (13 features, 3 classes). It resumes only through
``ray.train.get_checkpoint()``, keeps its own checkpoint file (``state.pt``: model, optimizer, epoch), counts
epochs from 0 and reports ``train_loss``, ``val_loss``, ``val_acc`` and ``epoch``, with no timing metrics. It
is the reference for "bring your own loop": PBT exploits, Tune retries and ``sweeps resume`` reach it through
``get_checkpoint()`` because the orchestrator seeds each Train run with the trial's checkpoint. As in Ray's PBT
guide, the trial's own ``lr`` is applied after a restore (the optimizer state carries the donor's).

Tests only: ``fail_once_at_epoch`` raises at that epoch in a run that did not resume from a checkpoint;
``epoch_sleep_s`` makes each epoch that much longer (a bigger model, in wall time); ``epoch_log`` names a
folder where rank 0 appends each epoch's start and the moment its checkpoint was written, just before its report
(a report that Tune answers by stopping the trial does not return in a trial that runs in its own process): an
outside measure of the training time Tune's clock sees.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any


def _data(seed: int) -> tuple[Any, Any, Any, Any]:
    import torch
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_wine(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    return (torch.tensor(scaler.transform(x_tr), dtype=torch.float32), torch.tensor(y_tr),
            torch.tensor(scaler.transform(x_va), dtype=torch.float32), torch.tensor(y_va))


def build_model(config: dict[str, Any]) -> Any:
    from torch import nn

    hidden = int(config.get("hidden_size", 32))
    return nn.Sequential(nn.Linear(13, hidden), nn.ReLU(), nn.Linear(hidden, 3))


def train_func(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(int(config.get("seed", 0)))
    x_tr, y_tr, x_va, y_va = _data(int(config.get("seed", 0)))
    loader = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(x_tr, y_tr), batch_size=int(config.get("batch_size", 16)), shuffle=True))
    model = ray.train.torch.prepare_model(build_model(config))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]), momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        module = model.module if hasattr(model, "module") else model
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
    for group in optimizer.param_groups:
        group["lr"] = float(config["lr"])

    for epoch in range(start_epoch, int(config.get("epochs", 10))):
        began = time.time()
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        model.train()
        total, count = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total, count = total + float(loss) * len(yb), count + len(yb)
        model.eval()
        with torch.no_grad():
            out = model(x_va)
            val_loss = float(loss_fn(out, y_va))
            val_acc = float((out.argmax(1) == y_va).float().mean())
        time.sleep(float(config.get("epoch_sleep_s", 0.0)))
        if config.get("fail_once_at_epoch") == epoch and start_epoch == 0:
            raise RuntimeError(f"injected failure at epoch {epoch} (fail_once_at_epoch)")
        metrics = {"train_loss": total / max(count, 1), "val_loss": val_loss, "val_acc": val_acc, "epoch": epoch}
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = None
            if ray.train.get_context().get_world_rank() == 0:
                module = model.module if hasattr(model, "module") else model
                torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(tmp, "state.pt"))
                ckpt = ray.train.Checkpoint.from_directory(tmp)
            _log_epoch(config, epoch, began)  # before the report: one Tune answers with a stop may never return
            ray.train.report(metrics, checkpoint=ckpt)


def _log_epoch(config: dict[str, Any], epoch: int, began: float) -> None:
    import ray.train

    folder = config.get("epoch_log")
    if folder and ray.train.get_context().get_world_rank() == 0:
        line = json.dumps({"lr": config["lr"], "epoch": epoch, "start": began, "end": time.time()})
        with open(os.path.join(folder, f"epochs-{os.getpid()}.jsonl"), "a") as f:
            f.write(line + "\n")
