"""The script adapter: a user's Lightning, Hugging Face Trainer, torchrun-style or Accelerate script, run unchanged
as each trial's Ray Train loop (docs/scripts.md).

``trainable.loop: trainables.script.train_loop`` and ``trainable.load_model: trainables.script.load_model``,
with the script named under ``trainable.script`` (``sweeps new trainable NAME --script PATH`` writes them).
"""

from __future__ import annotations

from typing import Any


def train_loop(config: dict[str, Any]) -> None:
    from trainables.script.launch import train_loop as run

    run(config)


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    from trainables.script.promote import load_model as load

    return load(checkpoint_dir, config)


def validation_data(config: dict[str, Any] | None = None) -> Any:
    from trainables.script.promote import validation_data as rows

    return rows(config)

