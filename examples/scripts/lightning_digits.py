"""Train a small MLP on scikit-learn's handwritten digits with PyTorch Lightning.

A plain Lightning example: a LightningModule, a LightningDataModule and a
Trainer. Logs go to a CSVLogger and checkpoints to ``--output-dir``.

Run on one process (CPU or whatever accelerator Lightning finds):

    python lightning_digits.py --max-epochs 8

Run with DDP on two CPU processes, launched by torchrun:

    torchrun --nproc-per-node 2 lightning_digits.py --devices 2 --accelerator cpu

Resume from a checkpoint written by an earlier run:

    python lightning_digits.py --ckpt-path lightning_out/lightning_logs/version_0/checkpoints/last.ckpt
"""
import argparse

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class DigitsMLP(pl.LightningModule):
    """MLP over raw 8x8 digit images flattened to 64 pixels (values 0..16)."""

    def __init__(self, lr=0.01, hidden=64, dropout=0.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, 10),
        )

    def forward(self, x):
        return self.net(x / 16.0)  # raw pixel rows in, logits out

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log("val/loss", loss, sync_dist=True)
        self.log("val/acc", acc, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class DigitsData(pl.LightningDataModule):
    """The 1797 digits from scikit-learn, split 75/25 with a fixed seed."""

    def __init__(self, batch_size=64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        x, y = load_digits(return_X_y=True)
        x_tr, x_va, y_tr, y_va = train_test_split(
            x, y, test_size=0.25, random_state=0, stratify=y
        )
        self.train_set = TensorDataset(
            torch.tensor(x_tr, dtype=torch.float32), torch.tensor(y_tr, dtype=torch.int64)
        )
        self.val_set = TensorDataset(
            torch.tensor(x_va, dtype=torch.float32), torch.tensor(y_va, dtype=torch.int64)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", type=str, default="lightning_out")
    parser.add_argument("--devices", type=str, default="auto", help='"auto" or a number')
    parser.add_argument("--accelerator", type=str, default="auto")
    parser.add_argument("--ckpt-path", type=str, default=None, help="checkpoint to resume from")
    args = parser.parse_args()

    pl.seed_everything(args.seed)
    model = DigitsMLP(lr=args.lr, hidden=args.hidden, dropout=args.dropout)
    dm = DigitsData(batch_size=args.batch_size)
    devices = int(args.devices) if args.devices.isdigit() else args.devices

    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        accelerator=args.accelerator,
        devices=devices,
        default_root_dir=args.output_dir,
        enable_progress_bar=False,
        logger=CSVLogger(args.output_dir),
        callbacks=[ModelCheckpoint(monitor="val/acc", mode="max", save_last=True)],
        log_every_n_steps=10,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
