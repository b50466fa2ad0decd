"""Tabular regression on scikit-learn's bundled diabetes data: proves the trainable contract is general.

Reports ``train/loss``, ``val/loss`` (MSE on the standardized target), ``val/rmse`` (standardized target),
``epoch``, ``opt/lr``. Checkpoints carry the training split's feature and target mean/std
(``preprocess.json``); :func:`load_model` wraps the network in them, so the promoted model takes the 10 raw
features as ``load_diabetes().data`` gives them and predicts disease progression in its original units.
"""

from __future__ import annotations

from typing import Any

METRICS = ("train/loss", "val/loss", "val/rmse", "epoch", "opt/lr")
NUM_FEATURES = 10
COLUMNS = ("age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")  # load_diabetes().feature_names


def _split(seed: int, val_fraction: float) -> dict[str, Any]:
    import numpy as np
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    x, y = load_diabetes(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=val_fraction, random_state=seed)
    xm, xs = x_tr.mean(axis=0), x_tr.std(axis=0)
    xs[xs == 0] = 1.0
    ym, ys = y_tr.mean(), y_tr.std()
    f32 = np.float32
    return {"x_tr": ((x_tr - xm) / xs).astype(f32), "y_tr": ((y_tr - ym) / ys).astype(f32),
            "x_va": ((x_va - xm) / xs).astype(f32), "y_va": ((y_va - ym) / ys).astype(f32),
            "x_va_raw": x_va, "y_va_raw": y_va, "x_mean": xm, "x_std": xs, "y_mean": ym, "y_std": ys}


def _arrays(seed: int = 0, val_fraction: float = 0.2) -> dict[str, Any]:
    from trainables.common import cached_arrays

    return cached_arrays(f"diabetes-v2-seed{seed}-val{val_fraction}", lambda: _split(seed, val_fraction))


def load_data(seed: int = 0, val_fraction: float = 0.2) -> tuple[Any, Any, Any, Any]:
    """Diabetes features and target, both standardized with train statistics, on a fixed split."""
    from trainables.common import cached_split

    return cached_split(f"diabetes-v2-seed{seed}-val{val_fraction}", lambda: _split(seed, val_fraction))


def preprocessing() -> dict[str, Any]:
    """The training split's feature and target mean/std: what :func:`load_data` applied."""
    a = _arrays()
    return {"x_mean": a["x_mean"].tolist(), "x_std": a["x_std"].tolist(), "y_mean": float(a["y_mean"]),
            "y_std": float(a["y_std"])}


def build_model(config: dict[str, Any]) -> Any:
    """MLP: 10 -> hidden (x depth) -> 1, output squeezed to shape (B,)."""
    from torch import nn

    class Squeeze(nn.Module):
        def forward(self, x: Any) -> Any:
            return x.squeeze(-1)

    hidden = int(config.get("hidden_size", 32))
    depth = int(config.get("num_layers", 1))
    layers: list[nn.Module] = []
    width = NUM_FEATURES
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers += [nn.Linear(width, 1), Squeeze()]
    return nn.Sequential(*layers)


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """Promotion's hook: raw features in, disease progression in original units out (scalers as buffers)."""
    from trainables import common

    net = common.load_weights(checkpoint_dir, build_model(config))
    s = common.load_preprocessing(checkpoint_dir)
    module = common.standardized(net, s["x_mean"], s["x_std"], y_mean=s["y_mean"], y_std=s["y_std"])
    return common.ServableModel(module=module, task="regression", columns=COLUMNS)


def validation_data() -> tuple[Any, Any]:
    """The fixed validation split as scikit-learn gives it: raw features (N, 10), target in original units."""
    a = _arrays()
    return a["x_va_raw"], a["y_va_raw"]


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker."""
    from trainables.loop import RegressionTask, fit

    fit(config, load_data, build_model, RegressionTask(), preprocessing=preprocessing)
