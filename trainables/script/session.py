"""One Train worker's side of a script trial: what the script logged, and one report per epoch on every rank.

``ray.train.report`` is a barrier: every rank must call it the same number of times. A script logs on rank 0
only, as a rule (a DDP script guards its logging with ``rank == 0``; Accelerate's ``log`` acts on the main
process only), so the points where a report is made are points every rank passes: Lightning's epoch end and
Hugging Face's save (callbacks that run on every rank), or, for a plain or Accelerate script, the start of the
next pass over its training data loader and the script's end (:mod:`trainables.script.loaders`). At such a
point rank 0 says whether it has anything to report (``broadcast_from_rank_zero``) and every rank reports, rank
0 with its metrics and the framework's checkpoint, the others with none (Ray keeps rank 0's).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from trainables.preemption import Watch

log = logging.getLogger(__name__)

META_DIR = "_sweeps"  # inside every checkpoint: what the adapter adds to the framework's own files
STATE_FILE = "state.json"  # {"framework", "resume": the path (in the checkpoint) the script resumes from}
EXAMPLES_FILE = "examples.pt"  # a few validation rows the script fed its model: promotion's input example
LOG_FILE = "script.log"  # rank 0's output so far
EXAMPLE_ROWS = 64

_current: Reporter | None = None


def current() -> Reporter | None:
    """The reporter of the script running in this process, or None outside a script trial."""
    return _current


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The values a report can carry: numbers (tensors and numpy scalars included), by their string names."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out[str(key)] = float(value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


class Reporter:
    """Collects what the script logs between report points and makes the reports."""

    def __init__(self, framework: str, metric: str, rank: int, world: int, every: int, log_path: str | None,
                 spot: Watch | None = None):
        self.framework, self.metric, self.rank, self.world = framework, metric, rank, world
        self.spot = spot  # preemption notices and the trial's count (trainables.preemption); None: not watched
        self.every = max(int(every), 0)
        self.log_path = log_path
        self.pending: dict[str, float] = {}
        self.reports = 0
        self.seen: dict[str, float] = {}  # every name rank 0 reported, with its last value
        self.examples: tuple[Any, Any] | None = None

    def __enter__(self) -> Reporter:
        global _current
        _current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _current
        _current = None

    # -- what the script logs ---------------------------------------------------------------------------
    def log(self, metrics: Mapping[str, Any]) -> None:
        """Metrics the script logged (MLflow, Accelerate, TensorBoard, sweeps.report): kept for the next report."""
        self.pending.update(numeric(metrics))

    def keep_examples(self, x: Any, y: Any) -> None:
        """The first validation rows the script fed its model (rank 0), for promotion's input example."""
        if self.examples is not None or self.rank != 0:
            return
        try:
            import torch

            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.ndim < 2:
                return
            self.examples = (x[:EXAMPLE_ROWS].detach().cpu().clone(), y[:EXAMPLE_ROWS].detach().cpu().clone())
        except Exception as exc:  # an odd batch: promotion says it has no example
            log.debug("no validation example kept (%s)", exc)

    # -- report points ----------------------------------------------------------------------------------
    def due(self) -> bool:
        """Whether the next report carries a checkpoint (``checkpoint_every``)."""
        return self.every > 0 and (self.reports + 1) % self.every == 0

    def agreed(self, has: bool) -> bool:
        """Rank 0's word on whether to report now, on every rank (a barrier when there are several)."""
        if self.world <= 1:
            return has
        from ray.train.collective import broadcast_from_rank_zero

        return bool(broadcast_from_rank_zero(has if self.rank == 0 else None))

    def report(self, metrics: Mapping[str, Any], save: Callable[[str], str | None] | None) -> None:
        """One report on this rank: rank 0's metrics with the checkpoint ``save(folder)`` writes into a fresh
        folder (it returns the path the script resumes from, relative to the folder, or None for the folder
        itself). ``save`` runs on every rank (frameworks save collectively); only rank 0 passes the folder."""
        import ray.train

        values = {**self.pending, **numeric(metrics)} if self.rank == 0 else {}
        self.pending = {}
        noticed = self.spot.due() if self.spot is not None else False  # every rank: a barrier
        folder = tempfile.mkdtemp(prefix="sweeps-ckpt-") if save is not None and (noticed or self.due()) else None
        try:
            checkpoint = None
            if folder is not None:
                resume = save(folder)  # type: ignore[misc]
                if self.rank == 0 and os.listdir(folder):
                    self._write_meta(folder, resume)
                    checkpoint = ray.train.Checkpoint.from_directory(folder)
            self.reports += 1
            if self.rank == 0:
                self.seen.update({k: v for k, v in values.items() if isinstance(v, float)})
                values.update(self.spot.metrics(self.reports) if self.spot is not None else {})
            ray.train.report(values, checkpoint=checkpoint)
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def flush(self, save: Callable[[str], str | None] | None) -> None:
        """A report point of a plain or Accelerate script: report what rank 0 logged since the last one."""
        if self.agreed(bool(self.pending)):
            self.report({}, save)
        else:
            self.pending = {}

    def _write_meta(self, folder: str, resume: str | None) -> None:
        meta = os.path.join(folder, META_DIR)
        os.makedirs(meta, exist_ok=True)
        with open(os.path.join(meta, STATE_FILE), "w") as f:
            json.dump({"framework": self.framework, "resume": resume, "reports": self.reports + 1}, f)
        if self.spot is not None:
            self.spot.write(meta, self.reports + 1)
        if self.examples is not None:
            import torch

            torch.save({"x": self.examples[0], "y": self.examples[1]}, os.path.join(meta, EXAMPLES_FILE))
        if self.log_path and os.path.isfile(self.log_path):
            shutil.copyfile(self.log_path, os.path.join(meta, LOG_FILE))

    def check_logged(self) -> None:
        """After the script ended, on rank 0: it must have reported the sweep's metric at least once."""
        if self.rank != 0 or not self.metric or self.metric in self.seen:
            return
        finite = [k for k, v in self.seen.items() if math.isfinite(v)]
        said = f"it logged {', '.join(sorted(finite))}" if finite else "it logged no metric sweeps could see"
        raise RuntimeError(f"the script logged no {self.metric!r} ({said}; {self.reports} report(s)); log it the "
                           f"way the script's framework logs, or add `sweeps.report({{{self.metric!r}: value}})` "
                           f"once per epoch")


def read_state(folder: str) -> dict[str, Any]:
    """The adapter's note in a checkpoint (an empty dict for a checkpoint it did not write)."""
    try:
        with open(os.path.join(folder, META_DIR, STATE_FILE)) as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return {}
