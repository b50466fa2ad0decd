"""A Train loop for tests/test_bridge_slow.py: reports whether its module saw an earlier trial in this process."""

from __future__ import annotations

import os
from typing import Any

SEEN: list[str] = []  # trial ids this module (in this process) has trained


def train_loop(config: dict[str, Any]) -> None:
    import ray.train

    seen_before = len(SEEN)
    SEEN.append(str(config.get("_trial_id")))
    ray.train.report({"seen_before": seen_before, "pid": os.getpid(), "epoch": 1, "val/acc": 0.5})
