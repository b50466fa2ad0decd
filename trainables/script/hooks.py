"""What the adapter changes around a user's script while it runs on a Train worker, each change undone after.

Nothing here edits the script: each hook replaces one attribute of a library the script uses (a class's method,
a module's function) for the length of the run, so the script's own calls reach the trial instead of a launch
that is not there. One function per concern; :func:`install` picks those the script's framework and source need.

- ``torch.distributed.init_process_group`` / ``destroy_process_group``: Ray Train already set up the group the
  script asks for (as ``torchrun`` would have left the environment for it); the script's own calls are no-ops.
- MLflow's ``log_metric(s)``, Accelerate's ``Accelerator.log``, TensorBoard's ``add_scalar(s)``: what the
  script logs goes to the trial's next report (and so to its MLflow child run); its own tracking store is a
  scratch folder in the trial's run folder, so no stray run appears anywhere.
- Plain and Accelerate scripts: ``DataLoader.__iter__`` marks the epochs (a new pass over the training data is a
  report point on every rank) and gives promotion its input example (the first validation batch).
- Lightning: ``Trainer`` gets Ray's DDP strategy and environment and the report callback; ``fit`` resumes.
- Hugging Face: ``Trainer`` reports at each save, with saves aligned to evaluations; ``train`` resumes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trainables.script.session import Reporter

log = logging.getLogger(__name__)


@dataclass
class RunState:
    """What one run of the script shares with the hooks."""

    framework: str
    work: str  # the script's working (and output) folder on this worker
    resume_file: str | None  # Lightning's / HF's checkpoint to continue from (a restored copy), or None
    lr: float | None  # the trial's learning rate, applied again after a restore (PBT)
    resuming: bool = False  # the run continues from a checkpoint
    last_saved: str | None = None  # the newest state the script saved itself (Accelerate's save_state, torch.save)
    notes: list[str] = field(default_factory=list)


def _swap(stack: contextlib.ExitStack, owner: Any, name: str, new: Any) -> Any:
    """Replace ``owner.name`` with ``new`` until ``stack`` closes; return the original."""
    old = getattr(owner, name)
    setattr(owner, name, new)
    stack.callback(setattr, owner, name, old)
    return old


def _under(path: Any, root: str) -> str | None:
    """``path`` relative to ``root`` when it is a file-system path inside it, else None."""
    if not isinstance(path, str | os.PathLike):
        return None
    full = os.path.abspath(os.fspath(path))
    root = os.path.abspath(root)
    return os.path.relpath(full, root) if full == root or full.startswith(root + os.sep) else None


# -- the launch ---------------------------------------------------------------------------------------------
def process_group(stack: contextlib.ExitStack) -> None:
    """The script's ``init_process_group`` joins the group Ray Train made; its ``destroy`` leaves it to Ray."""
    import torch.distributed as dist

    init = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if dist.is_initialized():
            log.debug("the script's init_process_group: Ray Train's group is already set up")
            return None
        return init(*args, **kwargs)

    def destroy_process_group(*args: Any, **kwargs: Any) -> None:
        return None

    _swap(stack, dist, "init_process_group", init_process_group)
    _swap(stack, dist, "destroy_process_group", destroy_process_group)


# -- what the script logs -----------------------------------------------------------------------------------
def mlflow_calls(stack: contextlib.ExitStack, rep: Reporter, scratch: str) -> None:
    """The script's MLflow metrics go to the trial's reports; its runs to a scratch store in the run folder."""
    import mlflow

    before = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    old = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    stack.callback(_restore_env, "MLFLOW_ALLOW_FILE_STORE", old)
    mlflow.set_tracking_uri("file:" + scratch)  # also sets MLFLOW_TRACKING_URI, for the script's subprocesses
    stack.callback(_restore_tracking, mlflow, before)
    for name in ("log_metric", "log_metrics"):
        for owner in (mlflow, mlflow.tracking.fluent):
            if hasattr(owner, name):
                _swap(stack, owner, name, _capture_mlflow(rep, name))


def _capture_mlflow(rep: Reporter, name: str) -> Callable[..., None]:
    def log_metric(key: str, value: Any, *args: Any, **kwargs: Any) -> None:
        rep.log({key: value})

    def log_metrics(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        rep.log(metrics)

    return log_metric if name == "log_metric" else log_metrics


def _restore_tracking(mlflow: Any, before: str | None) -> None:
    mlflow.set_tracking_uri(before)  # None: back to the environment's (or MLflow's default)


def _restore_env(key: str, old: str | None) -> None:
    if old is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = old


def tensorboard(stack: contextlib.ExitStack, rep: Reporter) -> None:
    """``SummaryWriter.add_scalar(tag, value)`` / ``add_scalars`` also go to the next report."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard itself is not installed: the script cannot use it either
        return
    scalar, scalars = SummaryWriter.add_scalar, SummaryWriter.add_scalars

    def add_scalar(self: Any, tag: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        rep.log({tag: value})
        return scalar(self, tag, value, *args, **kwargs)

    def add_scalars(self: Any, main_tag: str, values: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        rep.log({f"{main_tag}/{k}": v for k, v in values.items()})
        return scalars(self, main_tag, values, *args, **kwargs)

    _swap(stack, SummaryWriter, "add_scalar", add_scalar)
    _swap(stack, SummaryWriter, "add_scalars", add_scalars)


def accelerate_calls(stack: contextlib.ExitStack, rep: Reporter, state: RunState) -> None:
    """``Accelerator.log`` feeds the reports (on the main process, where Accelerate logs); ``save_state``'s
    folder is what a resume hands back."""
    try:
        from accelerate import Accelerator
    except ImportError:  # the script cannot use it either
        return

    log_fn, save_fn = Accelerator.log, Accelerator.save_state

    def log_values(self: Any, values: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        rep.log(values)
        return log_fn(self, values, *args, **kwargs)

    def save_state(self: Any, output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        out = save_fn(self, output_dir, *args, **kwargs)
        state.last_saved = _under(out if isinstance(out, str) else output_dir, state.work) or state.last_saved
        return out

    _swap(stack, Accelerator, "log", log_values)
    _swap(stack, Accelerator, "save_state", save_state)


def restored_lr(stack: contextlib.ExitStack, lr: float) -> None:
    """A resumed run (a retry, ``sweeps resume``, a PBT exploit) restores the optimizer and scheduler states the
    checkpoint saved, learning rate included: the trial's own value (PBT's mutation) wins. Every framework
    restores through ``Optimizer.load_state_dict`` and ``LRScheduler.load_state_dict``, so the value is set
    again right after each, whoever calls it."""
    import torch

    opt_load = torch.optim.Optimizer.load_state_dict
    sched_cls = torch.optim.lr_scheduler.LRScheduler
    sched_load = sched_cls.load_state_dict

    def optimizer_load(self: Any, state_dict: Any) -> Any:
        out = opt_load(self, state_dict)
        for group in self.param_groups:
            group["lr"] = lr
            if "initial_lr" in group:
                group["initial_lr"] = lr
        log.info("the trial's learning rate %g applied after the optimizer's restore", lr)
        return out

    def scheduler_load(self: Any, state_dict: Any) -> Any:
        out = sched_load(self, state_dict)
        if getattr(self, "base_lrs", None):
            self.base_lrs = [lr for _ in self.base_lrs]
        return out

    _swap(stack, torch.optim.Optimizer, "load_state_dict", optimizer_load)
    _swap(stack, sched_cls, "load_state_dict", scheduler_load)


def torch_saves(stack: contextlib.ExitStack, state: RunState) -> None:
    """The newest file a plain script writes with ``torch.save`` inside its folder: what a resume hands back."""
    import torch

    save = torch.save

    def torch_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        out = save(obj, f, *args, **kwargs)
        state.last_saved = _under(f, state.work) or state.last_saved
        return out

    _swap(stack, torch, "save", torch_save)


# -- epochs of a plain or Accelerate script -----------------------------------------------------------------
class Epochs:
    """Report points of a script without callbacks: each new pass over the training data (the first dataset
    iterated) after the first, and the script's end. The first batch of another dataset is the validation
    example promotion keeps."""

    def __init__(self, rep: Reporter, save: Callable[[str], str | None]) -> None:
        self.rep, self.save = rep, save
        self.train: int | None = None
        self.passes = 0

    def started(self, loader: Any) -> None:
        key = id(getattr(loader, "dataset", loader))
        if self.train is None:
            self.train = key
        if key == self.train:
            self.passes += 1
            if self.passes > 1:
                self.rep.flush(self.save)

    def batches(self, loader: Any, it: Iterator[Any]) -> Iterator[Any]:
        """The loader's batches, the first of a validation loader kept as promotion's example."""
        first = True
        for batch in it:
            if first and id(getattr(loader, "dataset", loader)) != self.train and self.rep.examples is None:
                if isinstance(batch, list | tuple) and len(batch) >= 2:
                    self.rep.keep_examples(batch[0], batch[1])
            first = False
            yield batch


def loaders(stack: contextlib.ExitStack, epochs: Epochs) -> None:
    from torch.utils.data import DataLoader

    iter_fn = DataLoader.__iter__
    depth = [0]

    def __iter__(self: Any) -> Any:
        if depth[0]:  # a DataLoader subclass (Accelerate's shards) calling DataLoader.__iter__: counted once
            return iter_fn(self)
        epochs.started(self)
        depth[0] += 1
        try:
            return epochs.batches(self, iter_fn(self))
        finally:
            depth[0] -= 1

    _swap(stack, DataLoader, "__iter__", __iter__)


# -- Lightning ----------------------------------------------------------------------------------------------
def lightning(stack: contextlib.ExitStack, rep: Reporter, state: RunState) -> None:
    """Every ``Trainer`` the script makes runs on Ray's DDP strategy and environment with the report callback;
    ``fit`` continues from the restored checkpoint when there is one."""
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.environments import ClusterEnvironment
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment

    init, fit = pl.Trainer.__init__, pl.Trainer.fit
    callback = _lightning_callback(pl, rep, state)

    @functools.wraps(init)  # LightningCLI reads the Trainer's options from this signature
    def trainer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        plugins = kwargs.get("plugins") or []
        plugins = [p for p in (plugins if isinstance(plugins, list | tuple) else [plugins])
                   if not isinstance(p, ClusterEnvironment)]
        kwargs.update(strategy=RayDDPStrategy(), plugins=[*plugins, RayLightningEnvironment()], devices="auto",
                      num_nodes=1)
        callbacks = kwargs.get("callbacks") or []
        kwargs["callbacks"] = [*(callbacks if isinstance(callbacks, list | tuple) else [callbacks]), callback]
        init(self, *args, **kwargs)

    @functools.wraps(fit)
    def trainer_fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.resume_file:
            args = args[:4]
            kwargs["ckpt_path"] = state.resume_file
        return fit(self, *args, **kwargs)

    _swap(stack, pl.Trainer, "__init__", trainer_init)
    _swap(stack, pl.Trainer, "fit", trainer_fit)


def _lightning_callback(pl: Any, rep: Reporter, state: RunState) -> Any:
    class SweepsReport(pl.Callback):  # type: ignore[misc,name-defined]
        """One report per training epoch on every rank, with a full checkpoint saved on every rank."""

        def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int,
                                      dataloader_idx: int = 0) -> None:
            if rep.examples is None and not trainer.sanity_checking and isinstance(batch, list | tuple) \
                    and len(batch) >= 2:
                rep.keep_examples(batch[0], batch[1])

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            metrics = {**trainer.callback_metrics, "epoch": trainer.current_epoch}
            groups = trainer.optimizers[0].param_groups if trainer.optimizers else []
            if groups:  # what the optimizer uses, as observed (a PBT mutation shows here after its exploit)
                metrics["opt/lr"] = groups[0]["lr"]

            def save(folder: str) -> str:
                trainer.save_checkpoint(os.path.join(folder, "model.ckpt"))
                return "model.ckpt"

            rep.report(metrics, save)

    return SweepsReport()


# -- Hugging Face -------------------------------------------------------------------------------------------
def huggingface(stack: contextlib.ExitStack, rep: Reporter, state: RunState) -> None:
    """Every ``Trainer`` reports at each save, saves where it evaluates, writes into the trial's folder, sends
    its logs nowhere else; ``train`` continues from the restored checkpoint when there is one."""
    import transformers

    init, train, step = (transformers.Trainer.__init__, transformers.Trainer.train,
                         transformers.Trainer.prediction_step)
    callback = _hf_callback(transformers, rep, state)

    @functools.wraps(init)
    def trainer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _align(self.args, state)
        self.add_callback(callback)
        for name in ("MLFlowCallback", "TensorBoardCallback", "WandbCallback", "CometCallback"):
            cls = getattr(transformers.integrations, name, None)
            if cls is not None:
                self.remove_callback(cls)

    @functools.wraps(train)
    def trainer_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if state.resume_file:
            args = ()
            kwargs["resume_from_checkpoint"] = state.resume_file
        return train(self, *args, **kwargs)

    @functools.wraps(step)
    def prediction_step(self: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if rep.examples is None and isinstance(inputs, dict) and "input_ids" in inputs and "labels" in inputs:
            rep.keep_examples(inputs["input_ids"], inputs["labels"])
        return step(self, model, inputs, *args, **kwargs)

    _swap(stack, transformers.Trainer, "__init__", trainer_init)
    _swap(stack, transformers.Trainer, "train", trainer_train)
    _swap(stack, transformers.Trainer, "prediction_step", prediction_step)


def _align(args: Any, state: RunState) -> None:
    """Saves where evaluations are (one report, with its checkpoint, per evaluation) in the trial's folder."""
    args.output_dir = state.work
    evaluate = str(getattr(getattr(args, "eval_strategy", "no"), "value", getattr(args, "eval_strategy", "no")))
    saves = str(getattr(args.save_strategy, "value", args.save_strategy))
    if evaluate in ("epoch", "steps") and (saves != evaluate or (evaluate == "steps"
                                                               and args.save_steps != args.eval_steps)):
        note = f"the Trainer saves at each evaluation ({evaluate}) instead of save_strategy={saves}"
        log.info("%s: one report, with its checkpoint, per evaluation", note)
        state.notes.append(note)
        args.save_strategy = type(args.save_strategy)(evaluate)
        if evaluate == "steps":
            args.save_steps = args.eval_steps
    args.save_only_model = False  # a resume needs the optimizer and scheduler too


def _hf_callback(transformers: Any, rep: Reporter, state: RunState) -> Any:
    class SweepsReport(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
        """Logs into the next report; one report per save, on every process (a barrier)."""

        def on_log(self, args: Any, st: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            rep.log(logs or {})

        def on_save(self, args: Any, st: Any, control: Any, **kw: Any) -> None:
            source = os.path.join(args.output_dir, f"checkpoint-{st.global_step}")

            def save(folder: str) -> str | None:
                if rep.rank == 0 and os.path.isdir(source):
                    shutil.copytree(source, os.path.join(folder, "checkpoint"))
                    return "checkpoint"
                return None

            rep.report({"epoch": st.epoch or 0.0}, save)

    return SweepsReport()


def install(stack: contextlib.ExitStack, rep: Reporter, state: RunState, source: str,
            save: Callable[[str], str | None]) -> Epochs | None:
    """The hooks this script needs; returns the epoch marker of a script without callbacks."""
    process_group(stack)
    if state.resuming and state.lr is not None:
        restored_lr(stack, state.lr)
    if "mlflow" in source:
        mlflow_calls(stack, rep, os.path.join(os.path.dirname(state.work), "mlruns"))
    if "SummaryWriter" in source or "tensorboard" in source:
        tensorboard(stack, rep)
    if state.framework == "lightning":
        lightning(stack, rep, state)
        return None
    if state.framework == "hf":
        huggingface(stack, rep, state)
        return None
    if "accelerate" in source:
        accelerate_calls(stack, rep, state)
    torch_saves(stack, state)
    epochs = Epochs(rep, save)
    loaders(stack, epochs)
    return epochs
