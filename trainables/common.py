"""Helpers shared by the bundled trainables: checkpoints, resume, the training knobs, what promotion needs.

Free of Hydra and MLflow on purpose: this module runs inside Ray Train workers.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_FILE = "model.pt"
OPTIM_FILE = "optimizer.pt"
META_FILE = "meta.json"
CHECKPOINT_FILES = (MODEL_FILE, OPTIM_FILE, META_FILE)

# Key under which the orchestrator hands a Tune checkpoint (PBT donor, retry, resume) to the workers.
RESUME_KEY = "_resume_from"
# Key under which the orchestrator tells the workers which trial they train (recorded in checkpoints).
TRIAL_ID_KEY = "_trial_id"
# Where prepared datasets are cached (one .npz per dataset, split and scikit-learn version).
DATA_CACHE_ENV = "SWEEPS_DATA_CACHE"


def cached_arrays(name: str, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``build()``'s numpy arrays, kept in a small on-disk cache shared by every worker process of a node.

    Importing scikit-learn costs about 1 CPU-second in each fresh Train worker; a cached split loads with
    numpy alone. The key holds scikit-learn's version, so an upgrade rebuilds. The file is written to a temp
    name and renamed, so workers starting together never read a half-written one; an unwritable cache
    folder only costs the rebuild.
    """
    from importlib.metadata import PackageNotFoundError, version

    import numpy as np

    try:
        sk = version("scikit-learn")
    except PackageNotFoundError:
        sk = "none"
    root = Path(os.environ.get(DATA_CACHE_ENV) or Path.home() / ".cache" / "sweeps" / "data")
    path = root / f"{name}-sklearn{sk}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError):
        pass  # not cached yet (or unreadable): build it
    arrays = build()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError:
        pass
    return arrays


def cached_split(name: str, build: Callable[[], dict[str, Any]]) -> tuple[Any, Any, Any, Any]:
    """``(x_train, y_train, x_val, y_val)`` tensors of a split that ``build`` returns as numpy arrays
    under the keys ``x_tr, y_tr, x_va, y_va``, through :func:`cached_arrays`."""
    import torch

    a = cached_arrays(name, build)
    return (torch.from_numpy(a["x_tr"]), torch.from_numpy(a["y_tr"]), torch.from_numpy(a["x_va"]),
            torch.from_numpy(a["y_va"]))


def resume_checkpoint(config: dict[str, Any]) -> Any | None:
    """The checkpoint to resume from, or None for a fresh start.

    A restarted Train worker group (``ray.train.FailureConfig``) sees its own latest checkpoint through
    ``ray.train.get_checkpoint()``; that one wins. So does the checkpoint the orchestrator seeds a new Train
    run with (PBT exploit, Tune retry, ``sweeps resume``). ``config["_resume_from"]`` names the same
    checkpoint, for loops run without that seeding: a ``ray.train.Checkpoint`` (path + filesystem), or a
    string that is a local path or a URI with its scheme (``s3://bucket/...``: a bare ``bucket/...`` would
    be read as a local path).
    """
    import ray.train

    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        return ckpt
    given = config.get(RESUME_KEY)
    if not given:
        return None
    if hasattr(given, "path") and hasattr(given, "filesystem"):
        return given
    return ray.train.Checkpoint(str(given))


def set_threads(config: dict[str, Any]) -> None:
    """Size torch's intra-op threads to the worker's CPUs (oversubscribing a small box thrashes)."""
    import torch

    n = config.get("torch_threads") or config.get("cpus_per_worker") or 1
    torch.set_num_threads(max(1, int(n)))


def effective_lr(config: dict[str, Any], world_size: int) -> float:
    """The learning rate a worker uses: ``lr``, times the world size when ``scale_lr`` is on (linear rule)."""
    lr = float(config["lr"])
    return lr * world_size if config.get("scale_lr", False) else lr


def accumulation_steps(config: dict[str, Any]) -> int:
    """Gradient accumulation steps from config (default 1); refuses values below 1."""
    steps = int(config.get("grad_accum_steps", 1))
    if steps < 1:
        raise ValueError(f"grad_accum_steps must be >= 1, got {steps}")
    return steps


def apply_hparams(optimizer: Any, lr: float, weight_decay: float | None = None) -> None:
    """Force the trial's current hyperparameters into a (possibly restored) optimizer.

    A restored optimizer state carries the donor's learning rate; PBT's explore step must win.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
        if weight_decay is not None:
            group["weight_decay"] = weight_decay


def save_checkpoint(directory: str, model: Any, optimizer: Any, meta: dict[str, Any]) -> None:
    """Write model/optimizer state dicts and a JSON meta file into ``directory``."""
    import torch

    raw = model.module if hasattr(model, "module") else model
    torch.save(raw.state_dict(), os.path.join(directory, MODEL_FILE))
    torch.save(optimizer.state_dict(), os.path.join(directory, OPTIM_FILE))
    Path(directory, META_FILE).write_text(json.dumps(meta, sort_keys=True, default=str))


def load_checkpoint(directory: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Read (model_state, optimizer_state, meta) written by :func:`save_checkpoint`.

    Uses ``torch.load(weights_only=True)``: a checkpoint never executes code.
    """
    import torch

    missing = [f for f in CHECKPOINT_FILES if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise FileNotFoundError(f"checkpoint {directory} is incomplete: missing {', '.join(missing)}")
    model_state = torch.load(os.path.join(directory, MODEL_FILE), map_location="cpu", weights_only=True)
    optim_state = torch.load(os.path.join(directory, OPTIM_FILE), map_location="cpu", weights_only=True)
    meta = json.loads(Path(directory, META_FILE).read_text())
    return model_state, optim_state, meta


# -- promotion: what a trainable hands over, and the extra file its checkpoints carry -----------------------
PREPROCESS_FILE = "preprocess.json"
TASKS = ("classification", "regression", "text")


@dataclass(frozen=True)
class ServableModel:
    """What a trainable's ``load_model(checkpoint_dir, config)`` returns for promotion.

    ``module`` maps the task's *raw* inputs to outputs in the task's own units: a float32 batch of feature rows
    ``(B, len(columns))`` to logits ``(B, len(labels))`` (classification) or to targets ``(B,)`` in original
    units (regression); for text, token ids ``(B, context)`` to logits ``(B, context, len(vocab) + 1)``.
    Scalers belong inside the module (buffers, see :func:`standardized`); the rest of the preprocessing is
    data: column names, label names, the tokenizer's vocabulary (character i has id i; every other character
    gets id ``len(vocab)``). ``requirements`` names the distributions the served model needs besides torch,
    numpy, pandas and mlflow (promotion pins them to the installed versions).
    """

    module: Any
    task: str
    columns: tuple[str, ...] = ()
    labels: tuple[Any, ...] = ()
    vocab: str = ""
    context: int = 0
    requirements: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"ServableModel.task: {self.task!r}; use one of {', '.join(TASKS)}")
        if self.task == "text" and (not self.vocab or self.context < 2):
            raise ValueError("ServableModel: a text model needs its vocab and a context of >= 2 tokens")
        if self.task != "text" and not self.columns:
            raise ValueError("ServableModel: a tabular model needs its input column names")


def save_preprocessing(directory: str, info: dict[str, Any]) -> None:
    """Write what turns raw inputs into the model's inputs (scaler statistics, vocabulary...) as JSON."""
    Path(directory, PREPROCESS_FILE).write_text(json.dumps(info, sort_keys=True))


def load_preprocessing(directory: str) -> dict[str, Any]:
    """Read :func:`save_preprocessing`'s file; FileNotFoundError names the checkpoint when it is missing."""
    path = Path(directory, PREPROCESS_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {directory} is incomplete: missing {PREPROCESS_FILE}")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def load_weights(directory: str, model: Any) -> Any:
    """Load :func:`save_checkpoint`'s model state into ``model`` (``weights_only``); the model, in eval mode.

    Only ``model.pt`` is read: the optimizer state and ``meta.json`` are for resuming, not for serving.
    """
    import torch

    path = os.path.join(directory, MODEL_FILE)
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise FileNotFoundError(f"checkpoint {directory} is incomplete: missing or empty {MODEL_FILE}")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


def standardized(net: Any, x_mean: Any, x_std: Any, y_mean: float | None = None,
                 y_std: float | None = None) -> Any:
    """``net`` behind a feature scaler (and, for a regressor, in front of the target's un-scaler).

    The statistics are buffers of the returned module: raw rows in, ``net``'s classes or original-unit targets
    out, so the scaler cannot be forgotten or mismatched when the model is exported and served.
    """
    import torch
    from torch import nn

    class Standardized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.register_buffer("x_mean", torch.as_tensor(x_mean, dtype=torch.float32))
            self.register_buffer("x_std", torch.as_tensor(x_std, dtype=torch.float32))
            self.register_buffer("y_mean", torch.tensor(0.0 if y_mean is None else float(y_mean)))
            self.register_buffer("y_std", torch.tensor(1.0 if y_std is None else float(y_std)))

        def forward(self, x: Any) -> Any:
            out = self.net((x.float() - self.x_mean) / self.x_std)  # (B, F) -> (B, C) or (B,)
            return out * self.y_std + self.y_mean

    return Standardized().eval()


@contextmanager
def checkpoint_dir(rank: int, epoch: int, every: int, watch: Any = None) -> Iterator[str | None]:
    """A temp dir for rank 0 on checkpointing epochs, else None (only rank 0 passes a checkpoint).

    With a :class:`trainables.preemption.Watch` (call it on every rank: it is a barrier), an epoch after a
    preemption notice checkpoints too, and every checkpoint holds the watch's note.
    """
    noticed = watch.due() if watch is not None else False
    if rank != 0 or not (noticed or (every > 0 and epoch % every == 0)):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="ckpt-") as d:
        if watch is not None:
            watch.write(d, epoch)
        yield d


class Stopwatch:
    """Splits an epoch's wall time into data-loading time and compute time."""

    def __init__(self) -> None:
        self.data_s = 0.0
        self.compute_s = 0.0
        self._t = time.perf_counter()

    def data_done(self) -> None:
        now = time.perf_counter()
        self.data_s += now - self._t
        self._t = now

    def compute_done(self) -> None:
        now = time.perf_counter()
        self.compute_s += now - self._t
        self._t = now

    def metrics(self) -> dict[str, float]:
        total = self.data_s + self.compute_s
        return {
            "time/data_s": self.data_s,
            "time/compute_s": self.compute_s,
            "time/data_frac": self.data_s / total if total > 0 else 0.0,
        }


def finite_or_nan(x: float) -> float:
    return x if math.isfinite(x) else float("nan")


def knob_errors(config: dict[str, Any]) -> list[str]:
    """Problems with the shared training knobs in ``config``, each naming its key; empty when all is well.

    Checked: ``lr`` (finite, > 0), ``scale_lr`` (true/false: a string such as "false" would be truthy),
    ``grad_accum_steps`` (integer >= 1), ``torch_threads`` (integer >= 1, or unset/0 = the worker's CPUs).
    """
    errors: list[str] = []

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    lr = config.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr)
                           or lr <= 0):
        errors.append(f"lr: must be a finite number > 0, got {lr!r}")
    scale = config.get("scale_lr", False)
    if not isinstance(scale, bool):
        errors.append(f"scale_lr: must be true or false, got {scale!r}")
    accum = config.get("grad_accum_steps", 1)
    if not is_int(accum) or accum < 1:
        errors.append(f"grad_accum_steps: must be an integer >= 1, got {accum!r}")
    threads = config.get("torch_threads")
    if threads is not None and (not is_int(threads) or threads < 0):
        errors.append(f"torch_threads: must be an integer >= 1 (or 0/unset: the worker's CPUs), got {threads!r}")
    return errors


def check_knobs(config: dict[str, Any]) -> None:
    """Raise ValueError listing every :func:`knob_errors` problem (call it first in a ``train_loop``)."""
    errors = knob_errors(config)
    if errors:
        raise ValueError("; ".join(errors))


def worker_facts(model: Any, rank: int, local_rank: int) -> dict[str, str]:
    """Where every worker trains, gathered to each rank (a collective: every rank calls it, once per start).

    ``sys/workers``: a JSON list, in rank order, of ``{"rank", "local_rank", "device"}``, where ``device`` is
    where the model's parameters live (``cuda:1``, ``cpu``), so a silent CPU fallback shows; ``sys/backend``:
    torch.distributed's backend (``nccl``, ``gloo``; ``none`` without a process group); ``sys/rendezvous``: the
    ``MASTER_ADDR:MASTER_PORT`` of the process group's store (rank 0 listens there); ``sys/placement``: the
    strategy of the placement group the workers run in (``PACK``, ``SPREAD``...; ``none`` outside one). Strings:
    they reach Tune's result rows, not MLflow's metrics.
    """
    import torch.distributed as dist

    mine = {"rank": rank, "local_rank": local_rank, "device": str(next(model.parameters()).device)}
    placement = {"sys/placement": _placement_strategy()}
    if not (dist.is_available() and dist.is_initialized()):
        return {"sys/workers": json.dumps([mine]), "sys/backend": "none", **placement}
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)  # rank order
    rendezvous = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    return {"sys/workers": json.dumps(every), "sys/backend": str(dist.get_backend()), "sys/rendezvous": rendezvous,
            **placement}


def _placement_strategy() -> str:
    """The strategy of the placement group this process runs in (Ray's public calls), ``none`` outside one."""
    import ray

    if not ray.is_initialized():
        return "none"
    pg = ray.util.get_current_placement_group()
    if pg is None:
        return "none"
    return str(ray.util.placement_group_table(pg).get("strategy") or "none")


def parameter_count(model: Any) -> int:
    """Trainable parameters of the model (the bare module inside a DDP wrapper): a cost objective."""
    raw = model.module if hasattr(model, "module") else model
    return int(sum(p.numel() for p in raw.parameters() if p.requires_grad))


def latency_ms(forward: Callable[[], Any], repeats: int = 3) -> float:
    """Median wall time of ``forward()`` (one inference over the validation batch), in milliseconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        forward()
        times.append((time.perf_counter() - t) * 1000)
    return sorted(times)[len(times) // 2]
