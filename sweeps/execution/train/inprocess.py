"""A single-process trial trained in its Tune trial's own process, and that process made ready for the next trial.

Ray Train's local mode (``ScalingConfig(num_workers=0)``) runs the loop in the calling process; the
``local_train`` lever (:mod:`sweeps.execution.levers.local_train`) sends each of its reports to Tune and answers
``ray.train.get_checkpoint()`` with the trial's own checkpoint. No Train controller, no worker process: torch,
the data and the loop's module are imported once per process, and Tune reuses the process for the sweep's next
trial (``reuse_actors``). What one trial leaves in the process never reaches the next: each trial starts with
its own CPU-thread count and the random state of a fresh process (torch, Python and NumPy seeded from the OS),
no Train utilities of the trial before (its last checkpoint), and the garbage and cached CUDA memory of the
trial before released; Tune gives each trial its own working directory. A module the loop imports keeps its own
globals across the trials of a process, as an imported module does (docs/ray.md, "Trials in their own process").
"""

from __future__ import annotations

import gc
import logging
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sweeps.config.targets import import_dotted
from sweeps.execution.train import bridge

if TYPE_CHECKING:
    from sweeps.execution.train.trial import TrialSetup

log = logging.getLogger(__name__)

def run(config: dict[str, Any], setup: TrialSetup, seed: Any,
        to_tune_for: Callable[[float], Callable[[dict[str, Any], Any], None]]) -> None:
    """Train one start of the trial here: ``config`` is the loop's config, ``seed`` the Tune checkpoint to start
    from (or None), ``to_tune_for(fit_called)`` what hands each report to Tune."""
    import ray.train
    from ray.train.torch import TorchTrainer

    from sweeps.execution.levers import local_train

    fresh_state(setup)
    start = ray.train.Checkpoint(seed.path, seed.filesystem) if seed is not None else None
    datasets = import_dotted(setup.datasets)(config) if setup.datasets else None
    fit_called = time.time()
    to_tune = to_tune_for(fit_called)

    def loop(cfg: dict[str, Any]) -> None:
        with local_train.reporting_to_tune(to_tune, start):
            bridge.seeded_loop(cfg, in_process=True)

    trainer = TorchTrainer(
        loop, train_loop_config=config, datasets=datasets,
        scaling_config=ray.train.ScalingConfig(num_workers=0, use_gpu=setup.use_gpu),
        run_config=ray.train.RunConfig(name=f"{config.get('_trial_id')}-local", storage_path=setup.train_dir),
    )
    try:
        trainer.fit()
    finally:
        local_train.forget()
        release()


def threads(setup: TrialSetup) -> int:
    """The CPU threads a trial's torch may use: its CPUs (as Train gives each worker), at least one."""
    return max(1, int(float(setup.resources_per_worker.get("CPU", 1) or 1)))


def fresh_state(setup: TrialSetup) -> None:
    """The process as a fresh one would start this trial: its thread count and untouched random state."""
    import torch

    torch.set_num_threads(threads(setup))
    torch.seed()  # as a fresh process's torch: seeded from the OS (every device)
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def release() -> None:
    """What the trial left that nothing references goes now: its objects (and their open files) and the CUDA
    memory torch's allocator cached for it, before the next trial of this process allocates its own."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
