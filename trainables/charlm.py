"""A character-level causal language model trained with Hugging Face ``transformers.Trainer`` inside Ray Train.

- Model: a small GPT-2 built from a config (``GPT2Config(n_layer, n_head, n_embd, ...)``): nothing is downloaded.
- Tokenizer: :class:`CharTokenizer`, a fixed character vocabulary (tab, newline, printable ASCII) plus one
  unknown id, so the model's shape never depends on the corpus.
- Corpus: text that ships with Python: docstrings of a fixed list of standard-library modules (train) and, held
  out, the Zen of Python plus two other modules' docstrings (validation). Deterministic for a given Python.
- Loop: ``transformers.Trainer`` on every Train worker, wrapped with
  ``ray.train.huggingface.transformers.prepare_trainer``. It reports through :class:`SweepsReportCallback`, not
  Ray's ``RayTrainReportCallback``: Ray's reports at *save* time with the Hugging Face checkpoint folder nested
  under ``checkpoint/`` (``model.safetensors``, ``trainer_state.json``...), which promotion and the PBT/resume
  path cannot read. Ours reports after each epoch's evaluation, with a checkpoint in the common layout
  (``model.pt``, ``optimizer.pt``, ``meta.json``), so ASHA, PBT, MLflow, reports and promotion treat this
  trainable like any other.

Reports ``train/loss``, ``val/loss`` (= ``eval_loss``), ``val/perplexity``, ``val/acc`` (next-character
accuracy), ``epoch``, ``opt/lr`` (scheduled, end of epoch), ``opt/peak_lr``, ``time/data_s``,
``time/compute_s``, ``time/data_frac``.

For promotion, :func:`load_model` (``trainable.load_model``) rebuilds the GPT-2 from a checkpoint, whose
``preprocess.json`` holds the tokenizer's vocabulary and the context length: the registered model scores raw
strings of any length. :func:`validation_data` gives held-out strings.
"""

from __future__ import annotations

import ast
import codecs
import functools
import importlib
import inspect
import math
import os
from typing import Any

from trainables import common, preemption

METRICS = ("train/loss", "val/loss", "eval_loss", "val/perplexity", "val/acc", "epoch", "opt/lr")
VOCAB = "\t\n" + "".join(chr(i) for i in range(32, 127))
UNKNOWN_CHAR = "\ufffd"
TRAIN_MODULES = ("argparse", "collections", "contextlib", "csv", "dataclasses", "difflib", "functools",
                 "itertools", "json", "pathlib", "random", "shutil", "statistics", "string")
VAL_MODULES = ("textwrap", "heapq")
DEFAULTS: dict[str, Any] = {
    "block_size": 64,     # characters per training sequence (and the model's context length)
    "max_chars": 60000,   # cap on the training text
    "val_chars": 4096,    # cap on the held-out text
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 64,
    "dropout": 0.0,
}


def _setting(config: dict[str, Any] | None, key: str) -> Any:
    return (config or {}).get(key, DEFAULTS[key])


class CharTokenizer:
    """Characters <-> ids over a fixed vocabulary; any other character maps to one unknown id.

    >>> tok = CharTokenizer()
    >>> tok.decode(tok.encode("Beautiful is better than ugly."))
    'Beautiful is better than ugly.'
    """

    def __init__(self, chars: str = VOCAB) -> None:
        if len(set(chars)) != len(chars):
            raise ValueError("CharTokenizer: the vocabulary has repeated characters")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.unk_id = len(chars)

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, self.unk_id) for c in text]

    def decode(self, ids: Any) -> str:
        return "".join(self.chars[i] if 0 <= i < len(self.chars) else UNKNOWN_CHAR for i in map(int, ids))


# -- corpus -------------------------------------------------------------------------------------------------
def zen_of_python() -> str:
    """PEP 20, decoded from the ``this`` module's source without importing it (importing prints it)."""
    import importlib.util

    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None:
        return ""
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "s" for t in node.targets):
            return codecs.decode(ast.literal_eval(node.value), "rot13")
    return ""


def module_docs(name: str) -> str:
    """A module's docstring and those of its public functions and classes, in name order."""
    mod = importlib.import_module(name)
    parts = [inspect.getdoc(mod) or ""]
    for attr in sorted(a for a in dir(mod) if not a.startswith("_")):
        obj = getattr(mod, attr)
        if getattr(obj, "__module__", None) == mod.__name__ and (doc := inspect.getdoc(obj)):
            parts.append(f"{attr}: {doc}")
    return "\n\n".join(p for p in parts if p)


@functools.lru_cache(maxsize=4)
def corpus(split: str, max_chars: int) -> str:
    """The training (``train``) or held-out (``val``) text, at most ``max_chars`` characters."""
    if split == "train":
        text = "\n\n".join(module_docs(m) for m in TRAIN_MODULES)
    elif split == "val":
        text = "\n\n".join([zen_of_python(), *(module_docs(m) for m in VAL_MODULES)])
    else:
        raise ValueError(f"split: {split!r}; use train or val")
    return text[:max_chars]


def blocks(text: str, block_size: int) -> Any:
    """Token ids cut into non-overlapping rows: (N, block_size) int64; the ragged tail is dropped."""
    import torch

    ids = torch.tensor(CharTokenizer().encode(text), dtype=torch.long)  # (chars,)
    n = len(ids) // block_size
    if n == 0:
        raise ValueError(f"corpus: {len(ids)} characters is less than one block of {block_size}")
    return ids[: n * block_size].view(n, block_size)


def validation_data(config: dict[str, Any] | None = None) -> tuple[list[str], None]:
    """The held-out text as promotion scores it: ``block_size``-character strings (the raw input), no targets."""
    text = corpus("val", int(_setting(config, "val_chars")))
    block = int(_setting(config, "block_size"))
    return [text[i:i + block] for i in range(0, len(text) - block + 1, block)], None


def preprocessing(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tokenizer (its characters; any other one is the unknown id) and the context: saved with checkpoints."""
    return {"vocab": VOCAB, "context": int(_setting(config, "block_size"))}


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """Promotion's hook: the checkpoint's GPT-2 (ids (B, T) -> logits (B, T, V)) with its saved tokenizer."""
    pre = common.load_preprocessing(checkpoint_dir)
    model = common.load_weights(checkpoint_dir, build_model(config))
    return common.ServableModel(module=model, task="text", vocab=str(pre["vocab"]), context=int(pre["context"]),
                                requirements=("transformers",))


# -- model --------------------------------------------------------------------------------------------------
def _offline() -> None:
    """Nothing may be fetched from a model hub: say so before transformers is imported."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ.setdefault(key, "1")


def build_model(config: dict[str, Any]) -> Any:
    """A small GPT-2 from its config (random init, no download), wrapped so ``model(ids)`` returns logits."""
    _offline()
    import torch
    from torch import nn
    from transformers import GPT2Config, GPT2LMHeadModel

    class CharLM(nn.Module):
        """``forward(input_ids)`` -> logits (B, T, V); with ``labels`` -> the HF output (loss, logits)."""

        def __init__(self, gpt_config: Any) -> None:
            super().__init__()
            self.gpt = GPT2LMHeadModel(gpt_config)

        def forward(self, input_ids: Any, labels: Any = None, attention_mask: Any = None) -> Any:
            out = self.gpt(input_ids=input_ids.long(), labels=labels, attention_mask=attention_mask)
            return out if labels is not None else out.logits  # (B, T, V)

    dropout = float(_setting(config, "dropout"))
    gpt_config = GPT2Config(
        vocab_size=CharTokenizer().vocab_size, n_positions=int(_setting(config, "block_size")),
        n_embd=int(_setting(config, "n_embd")), n_layer=int(_setting(config, "n_layer")),
        n_head=int(_setting(config, "n_head")), resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
        use_cache=False,  # no past_key_values in eval outputs: Trainer gathers logits only
        bos_token_id=None, eos_token_id=None,
    )
    torch.manual_seed(int(config.get("seed", 0)))
    return CharLM(gpt_config)


# -- learning-rate schedule ---------------------------------------------------------------------------------
def warmup_steps(config: dict[str, Any], total_steps: int) -> int:
    """``warmup_steps`` when > 0, else ``warmup_ratio`` x the run's total optimizer steps."""
    steps = int(config.get("warmup_steps", 0) or 0)
    ratio = float(config.get("warmup_ratio", 0.0) or 0.0)
    if steps < 0 or not 0.0 <= ratio < 1.0:
        raise ValueError(f"warmup_steps must be >= 0 and warmup_ratio within [0, 1); got {steps}, {ratio}")
    return steps if steps > 0 else int(math.ceil(ratio * total_steps))


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warmup to 1, then linear decay to 0 at ``total`` (Hugging Face's "linear" schedule)."""
    if step < warmup:
        return float(step + 1) / float(warmup + 1)
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def _offset_factor(step: int, offset: int, warmup: int, total: int) -> float:
    return lr_factor(step + offset, warmup, total)


# -- the loop -----------------------------------------------------------------------------------------------
def _eval_latency_ms(model: Any, loader: Any) -> float:
    """Inference latency of one validation batch (rank 0 reports it), or NaN when there is none."""
    import torch

    if model is None or loader is None:
        return float("nan")
    try:
        batch = next(iter(loader))
    except (StopIteration, TypeError):
        return float("nan")
    ids = batch["input_ids"] if isinstance(batch, dict) else batch[0]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        ms = common.latency_ms(lambda: model(input_ids=ids.to(next(model.parameters()).device)))
    model.train(was_training)
    return ms


def _report_callback(*, config: dict[str, Any], rank: int, first_epoch: int, step_offset: int, optimizer: Any,
                     peak_lr: float, accum: int, world: int, restored: dict[str, Any],
                     spot: preemption.Watch) -> Any:
    import ray.train
    import torch
    from transformers import TrainerCallback

    class SweepsReportCallback(TrainerCallback):  # type: ignore[misc]
        """After each epoch's evaluation: ``ray.train.report`` on every rank, rank 0 with a checkpoint."""

        def __init__(self) -> None:
            self.watch = common.Stopwatch()
            self.train_loss = float("nan")
            self.restored = dict(restored)

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.watch = common.Stopwatch()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.watch.data_done()  # the step's batches were fetched just before this call

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.watch.compute_done()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs:
                self.train_loss = float(logs["loss"])

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None,
                        model: Any = None, **kw: Any) -> None:
            metrics = metrics or {}
            epoch = first_epoch - 1 + int(round(state.epoch or 0))
            eval_loss = common.finite_or_nan(float(metrics.get("eval_loss", float("nan"))))
            report = {
                "train/loss": self.train_loss,
                "val/loss": eval_loss,
                "eval_loss": eval_loss,
                "val/perplexity": math.exp(min(eval_loss, 50.0)) if math.isfinite(eval_loss) else float("nan"),
                "val/acc": float(metrics.get("eval_accuracy", float("nan"))),
                "epoch": epoch,
                "opt/lr": optimizer.param_groups[0]["lr"],
                "opt/peak_lr": peak_lr,
                "opt/grad_accum_steps": accum,
                "train/global_step": step_offset + state.global_step,  # optimizer steps since epoch 1
                "sys/world_size": world,
                "sys/torch_threads": torch.get_num_threads(),
                "model/params": common.parameter_count(model) if model is not None else float("nan"),
                "model/latency_ms": _eval_latency_ms(model, kw.get("eval_dataloader")),
                **self.watch.metrics(),
                **self.restored,
            }
            self.restored = {}
            every = int(config.get("checkpoint_every", 1))
            with common.checkpoint_dir(rank, epoch, every, spot) as d:
                checkpoint = None
                if d is not None:
                    meta = {"epoch": epoch, "lr": peak_lr, "val/loss": eval_loss, "val/acc": report["val/acc"],
                            "global_step": step_offset + state.global_step, "trial_id": config.get(common.TRIAL_ID_KEY)}
                    common.save_checkpoint(d, model, optimizer, meta)
                    common.save_preprocessing(d, preprocessing(config))
                    checkpoint = ray.train.Checkpoint.from_directory(d)
                ray.train.report({**report, **spot.metrics(epoch)}, checkpoint=checkpoint)

    return SweepsReportCallback()


def _next_char_accuracy(eval_pred: Any) -> dict[str, float]:
    """Trainer ``compute_metrics``: predictions (N, T) argmax ids; position t predicts label t+1."""
    import numpy as np

    preds, labels = eval_pred.predictions, eval_pred.label_ids
    return {"accuracy": float(np.mean(preds[:, :-1] == labels[:, 1:]))}


def _argmax_logits(logits: Any, labels: Any) -> Any:
    """Keep (N, T) ids, not (N, T, V) logits, between evaluation batches."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Train worker: ``transformers.Trainer`` over this worker's share of the character blocks."""
    _offline()
    import shutil
    import tempfile

    import ray.train
    import torch
    import transformers
    from ray.train.huggingface.transformers import prepare_trainer
    from transformers import Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    common.check_knobs(config)
    common.set_threads(config)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()

    class Blocks(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, rows: Any) -> None:
            self.rows = rows  # (N, T)

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.rows[i], "labels": self.rows[i]}  # GPT-2 shifts the labels itself

    block = int(_setting(config, "block_size"))
    train_rows = blocks(corpus("train", int(_setting(config, "max_chars"))), block)  # (N, T)
    val_rows = blocks(corpus("val", int(_setting(config, "val_chars"))), block)

    model = build_model(config)
    peak_lr = common.effective_lr(config, world)
    weight_decay = float(config.get("weight_decay", 0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=weight_decay)
    accum = common.accumulation_steps(config)

    first_epoch, restored = 1, {}
    ckpt = common.resume_checkpoint(config)
    spot = preemption.Watch.start(None, config.get(common.TRIAL_ID_KEY))
    if ckpt is not None:
        with ckpt.as_directory() as d:
            model_state, optim_state, meta = common.load_checkpoint(d)
            spot = preemption.Watch.start(d, config.get(common.TRIAL_ID_KEY))
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)
        first_epoch = int(meta["epoch"]) + 1
        restored = {"restored_from": str(meta.get("trial_id", "")), "restored_epoch": int(meta["epoch"])}
    common.apply_hparams(optimizer, peak_lr, weight_decay)  # the trial's (possibly PBT-mutated) values win
    for group in optimizer.param_groups:
        group["initial_lr"] = peak_lr  # LambdaLR scales initial_lr; a restored state carries the donor's

    epochs = int(config.get("epochs", 3))
    if first_epoch > epochs:
        return  # the checkpoint already holds the whole budget
    output_dir = tempfile.mkdtemp(prefix="hf-trainer-")
    args = TrainingArguments(
        output_dir=output_dir,
        num_train_epochs=epochs - first_epoch + 1,
        per_device_train_batch_size=int(config.get("batch_size", 16)),
        per_device_eval_batch_size=int(config.get("eval_batch_size", 64)),
        gradient_accumulation_steps=accum,
        max_grad_norm=float(config.get("max_grad_norm", 1.0)),
        eval_strategy="epoch",
        logging_strategy="epoch",
        save_strategy="no",  # checkpoints go through SweepsReportCallback, in the common layout
        report_to="none",
        disable_tqdm=True,
        log_level="error",
        use_cpu=not torch.cuda.is_available(),
        seed=int(config.get("seed", 0)),
        dataloader_num_workers=0,
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
        average_tokens_across_devices=False,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Blocks(train_rows),
        eval_dataset=Blocks(val_rows),
        optimizers=(optimizer, None),
        compute_metrics=_next_char_accuracy,
        preprocess_logits_for_metrics=_argmax_logits,
    )
    # One schedule over the whole budget, entered at the resumed epoch's step.
    steps_per_epoch = max(1, math.ceil(len(trainer.get_train_dataloader()) / accum))
    total = steps_per_epoch * epochs
    offset = (first_epoch - 1) * steps_per_epoch
    trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, functools.partial(
        _offset_factor, offset=offset, warmup=warmup_steps(config, total), total=total))
    trainer.add_callback(_report_callback(config=config, rank=rank, first_epoch=first_epoch, step_offset=offset,
                                          optimizer=optimizer, peak_lr=peak_lr, accum=accum, world=world,
                                          restored=restored, spot=spot))
    trainer = prepare_trainer(trainer)
    common.set_threads(config)  # accelerate may have resized torch's thread pool
    try:
        trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
