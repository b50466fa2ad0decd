"""An MLP on scikit-learn's bundled 8x8 digits, data-parallel under Ray Train.

Reports ``train/loss``, ``val/loss``, ``val/acc``, ``epoch`` and ``opt/lr`` every epoch, with a checkpoint
(model + optimizer + epoch, and the training split's pixel mean/std in ``preprocess.json``) every
``checkpoint_every`` epochs. The network trains on standardized pixels; :func:`load_model` puts the scaler in
front of it, so the promoted model takes raw ``load_digits().data`` rows and returns the digit.
"""

from __future__ import annotations

from typing import Any

METRICS = ("train/loss", "val/loss", "val/acc", "epoch", "opt/lr")
NUM_FEATURES = 64
NUM_CLASSES = 10
COLUMNS = tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8))  # load_digits(as_frame=True)'s names


def _split(seed: int, val_fraction: float) -> dict[str, Any]:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    std[std == 0] = 1.0  # pixels that are always blank in train stay 0, not 1e6x
    return {"x_tr": ((x_tr - mean) / std).astype(np.float32), "y_tr": y_tr.astype(np.int64),
            "x_va": ((x_va - mean) / std).astype(np.float32), "y_va": y_va.astype(np.int64),
            "x_va_raw": x_va, "mean": mean, "std": std}


def _arrays(seed: int = 0, val_fraction: float = 0.2) -> dict[str, Any]:
    from trainables.common import cached_arrays

    return cached_arrays(f"digits-v2-seed{seed}-val{val_fraction}", lambda: _split(seed, val_fraction))


def load_data(seed: int = 0, val_fraction: float = 0.2) -> tuple[Any, Any, Any, Any]:
    """Digits, standardized with train statistics, on a fixed split. Returns float32/int64 tensors."""
    from trainables.common import cached_split

    return cached_split(f"digits-v2-seed{seed}-val{val_fraction}", lambda: _split(seed, val_fraction))


def preprocessing() -> dict[str, Any]:
    """The training split's per-pixel mean and std: what :func:`load_data` applied (saved with checkpoints)."""
    a = _arrays()
    return {"x_mean": a["mean"].tolist(), "x_std": a["std"].tolist()}


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


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """Promotion's hook: the checkpoint's MLP behind its saved scaler -> raw pixel rows in, digit logits out."""
    from trainables import common

    net = common.load_weights(checkpoint_dir, build_model(config))
    stats = common.load_preprocessing(checkpoint_dir)
    return common.ServableModel(module=common.standardized(net, stats["x_mean"], stats["x_std"]),
                                task="classification", columns=COLUMNS, labels=tuple(range(NUM_CLASSES)))


def validation_data() -> tuple[Any, Any]:
    """The fixed validation split as scikit-learn gives it: raw pixel rows (N, 64) and digit labels (N,)."""
    a = _arrays()
    return a["x_va_raw"], a["y_va"]


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker: classification of the 10 digits."""
    from trainables.loop import ClassificationTask, fit

    fit(config, load_data, build_model, ClassificationTask(), preprocessing=preprocessing)
