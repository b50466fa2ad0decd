"""An MLP on scikit-learn's bundled 8x8 digits, data-parallel under Ray Train.

Reports ``train/loss``, ``val/loss``, ``val/acc``, ``epoch`` and ``opt/lr`` every epoch, with a checkpoint
(model + optimizer + epoch) every ``checkpoint_every`` epochs.
"""

from __future__ import annotations

from typing import Any

METRICS = ("train/loss", "val/loss", "val/acc", "epoch", "opt/lr")
NUM_FEATURES = 64
NUM_CLASSES = 10


def _split(seed: int, val_fraction: float) -> dict[str, Any]:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0  # pixels that are always blank in train stay 0, not 1e6x
    return {"x_tr": ((x_tr - mean) / std).astype(np.float32), "y_tr": y_tr.astype(np.int64),
            "x_va": ((x_va - mean) / std).astype(np.float32), "y_va": y_va.astype(np.int64)}


def load_data(seed: int = 0, val_fraction: float = 0.2) -> tuple[Any, Any, Any, Any]:
    """Digits, standardized with train statistics, on a fixed split. Returns float32/int64 tensors."""
    from trainables.common import cached_split

    return cached_split(f"digits-seed{seed}-val{val_fraction}", lambda: _split(seed, val_fraction))


def build_model(config: dict[str, Any]) -> Any:
    """The MLP: 64 -> hidden (x depth) -> 10 logits."""
    from torch import nn

    hidden = int(config.get("hidden_size", 64))
    depth = int(config.get("num_layers", 1))
    dropout = float(config.get("dropout", 0.0))
    layers: list[nn.Module] = []
    width = NUM_FEATURES
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    layers.append(nn.Linear(width, NUM_CLASSES))
    return nn.Sequential(*layers)


def validation_data() -> tuple[Any, Any]:
    """The fixed validation split (features, labels), for promotion checks."""
    _, _, x_va, y_va = load_data()
    return x_va, y_va


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker: classification of the 10 digits."""
    from trainables.loop import ClassificationTask, fit

    fit(config, load_data, build_model, ClassificationTask())
