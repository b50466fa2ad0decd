"""Train an MLP on scikit-learn's wine data with plain PyTorch DistributedDataParallel.

The script sets up the process group itself when it is launched by torchrun (which
sets RANK, LOCAL_RANK and WORLD_SIZE) and runs as a single process otherwise.
Rank 0 logs parameters and per-epoch metrics to MLflow (experiment "ddp-wine";
point MLFLOW_TRACKING_URI elsewhere to keep ./mlruns clean) and writes
``model.pt`` (the bare model's state_dict) and ``checkpoint.pt`` (model,
optimizer, epoch) to ``--output-dir``.

Run on one process:

    python ddp_wine.py --epochs 10

Run on two processes on one machine (gloo on CPU, nccl on GPUs):

    torchrun --nproc-per-node 2 ddp_wine.py --epochs 10

Continue from ``<output-dir>/checkpoint.pt``:

    torchrun --nproc-per-node 2 ddp_wine.py --epochs 20 --resume
"""
import argparse
import contextlib
import os

import mlflow
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class WineNet(nn.Module):
    """MLP over raw wine feature rows; standardization is part of the model."""

    def __init__(self, hidden=32, n_features=13, n_classes=3):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def set_normalization(self, x):
        self.mean.copy_(x.mean(dim=0))
        self.std.copy_(x.std(dim=0))

    def forward(self, x):
        return self.net((x - self.mean) / self.std)


def load_data():
    x, y = load_wine(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    train_set = TensorDataset(torch.tensor(x_tr, dtype=torch.float32), torch.tensor(y_tr))
    val_set = TensorDataset(torch.tensor(x_va, dtype=torch.float32), torch.tensor(y_va))
    return train_set, val_set


def train_one_epoch(model, loader, optimizer, device):
    """Returns a tensor [sum of losses, number of examples] for this rank."""
    model.train()
    totals = torch.zeros(2, device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        totals += torch.tensor([loss.item() * len(y), len(y)], device=device)
    return totals


@torch.no_grad()
def evaluate(model, loader, device):
    """Returns a tensor [sum of losses, number correct, number of examples] for this rank."""
    model.eval()
    totals = torch.zeros(3, device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits, y, reduction="sum").item()
        correct = (logits.argmax(dim=1) == y).sum().item()
        totals += torch.tensor([loss, correct, len(y)], device=device)
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--output-dir", type=str, default="ddp_out")
    parser.add_argument("--resume", action="store_true", help="continue from <output-dir>/checkpoint.pt")
    parser.add_argument("--backend", type=str, default="gloo", choices=["gloo", "nccl"])
    args = parser.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group(backend=args.backend)
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if args.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)

    train_set, val_set = load_data()
    train_sampler = DistributedSampler(train_set, world_size, rank, shuffle=True, seed=0)
    val_sampler = DistributedSampler(val_set, world_size, rank, shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=val_sampler)

    model = WineNet(hidden=args.hidden)
    model.set_normalization(train_set.tensors[0])
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    start_epoch = 0
    ckpt_path = os.path.join(args.output_dir, "checkpoint.pt")
    if args.resume and os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_epoch = ckpt["epoch"] + 1
    if distributed:
        model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    bare_model = model.module if distributed else model

    if rank == 0:
        os.makedirs(args.output_dir, exist_ok=True)
        mlflow.set_experiment("ddp-wine")
    with mlflow.start_run() if rank == 0 else contextlib.nullcontext():
        if rank == 0:
            mlflow.log_params(vars(args))

        for epoch in range(start_epoch, args.epochs):
            train_sampler.set_epoch(epoch)
            train = train_one_epoch(model, train_loader, optimizer, device)
            val = evaluate(model, val_loader, device)
            if distributed:  # sum the per-rank totals, so every rank sees the global averages
                dist.all_reduce(train)
                dist.all_reduce(val)
            metrics = {
                "train_loss": (train[0] / train[1]).item(),
                "val_loss": (val[0] / val[2]).item(),
                "val_acc": (val[1] / val[2]).item(),
            }
            if rank == 0:
                mlflow.log_metrics(metrics, step=epoch)
                print(f"epoch {epoch}: " + " ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
                state = bare_model.state_dict()
                torch.save(state, os.path.join(args.output_dir, "model.pt"))
                torch.save({"model": state, "optimizer": optimizer.state_dict(), "epoch": epoch}, ckpt_path)

    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
