"""Fit an MLP regressor to scikit-learn's diabetes data with Hugging Face Accelerate.

The same script runs on one process or several: Accelerate reads the launch
environment. Metrics go to whatever trackers ``Accelerator`` is configured with
(none by default), and the full training state is saved after every epoch to
``<output-dir>/epoch_N`` with ``accelerator.save_state``.

Run on one process:

    python accelerate_diabetes.py --epochs 10

Run on two GPUs:

    accelerate launch --num_processes 2 accelerate_diabetes.py --epochs 10

Run two processes on the CPU. (``accelerate launch --cpu`` starts more than one
process only through MPI; torchrun plus ACCELERATE_USE_CPU gives gloo DDP.)

    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 accelerate_diabetes.py
    ACCELERATE_USE_CPU=true torchrun --nproc-per-node 2 accelerate_diabetes.py

Resume after epoch 4 of an earlier run:

    python accelerate_diabetes.py --epochs 10 --resume-from-checkpoint accelerate_out/epoch_4
"""
import argparse
import os
import re

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    """MLP over raw feature rows; returns predictions in the target's own units."""

    def __init__(self, hidden=64, n_features=10):
        super().__init__()
        self.register_buffer("x_mean", torch.zeros(n_features))
        self.register_buffer("x_std", torch.ones(n_features))
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_std", torch.ones(()))
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def set_normalization(self, x, y):
        self.x_mean.copy_(x.mean(dim=0))
        self.x_std.copy_(x.std(dim=0))
        self.y_mean.copy_(y.mean())
        self.y_std.copy_(y.std())

    def forward(self, x):
        z = self.net((x - self.x_mean) / self.x_std).squeeze(-1)
        return z * self.y_std + self.y_mean


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output-dir", type=str, default="accelerate_out")
    parser.add_argument("--resume-from-checkpoint", type=str, default=None,
                        help="a folder written by accelerator.save_state, e.g. accelerate_out/epoch_4")
    args = parser.parse_args()

    accelerator = Accelerator(project_dir=args.output_dir)
    accelerator.init_trackers("diabetes", config=vars(args))
    set_seed(0)

    x, y = load_diabetes(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=0)
    x_tr, x_va, y_tr, y_va = (torch.tensor(a, dtype=torch.float32) for a in (x_tr, x_va, y_tr, y_va))
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=args.batch_size)

    model = Regressor(hidden=args.hidden)
    model.set_normalization(x_tr, y_tr)
    y_var = y_tr.var().item()  # losses are MSE / y_var, i.e. on the standardized target
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )

    start_epoch = 0
    if args.resume_from_checkpoint:
        accelerator.load_state(args.resume_from_checkpoint)
        start_epoch = int(re.search(r"epoch_(\d+)", args.resume_from_checkpoint).group(1)) + 1
        accelerator.print(f"resumed from {args.resume_from_checkpoint}, starting at epoch {start_epoch}")

    for epoch in range(start_epoch, args.epochs):
        model.train()
        train_totals = torch.zeros(2, device=accelerator.device)  # sum of losses, count
        for xb, yb in train_loader:
            loss = F.mse_loss(model(xb), yb) / y_var
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            train_totals += torch.tensor([loss.item() * len(yb), len(yb)], device=accelerator.device)
        train_totals = accelerator.reduce(train_totals, reduction="sum")

        model.eval()
        preds, targets = [], []
        with torch.no_grad():
            for xb, yb in val_loader:
                preds.append(accelerator.gather_for_metrics(model(xb)))
                targets.append(accelerator.gather_for_metrics(yb))
        preds, targets = torch.cat(preds), torch.cat(targets)
        val_mse = F.mse_loss(preds, targets).item()
        metrics = {
            "train_loss": (train_totals[0] / train_totals[1]).item(),
            "val_loss": val_mse / y_var,
            "val_rmse": val_mse ** 0.5,
        }
        accelerator.log(metrics, step=epoch)
        accelerator.print(f"epoch {epoch}: " + " ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))

    accelerator.end_training()


if __name__ == "__main__":
    main()
