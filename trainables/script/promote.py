"""Promotion of a script trial: the best checkpoint read the framework's way, with the script's own validation rows.

- Lightning: the ``LightningModule`` class the script defines, built from the checkpoint's hyper-parameters and
  given its ``state_dict`` (``torch.load(weights_only=True)``; no pickle runs).
- Hugging Face: ``AutoModelForSequenceClassification.from_pretrained`` on the checkpoint folder, served as
  token ids in, logits out (the attention mask is derived from the padding id).
- Plain and Accelerate scripts: the ``nn.Module`` the scaffold found the script building (``model_build``,
  e.g. ``WineNet(hidden=config['hidden'])``) given the state dict the script saved (``model.pt``) or the model
  file ``save_state`` wrote (``model.safetensors``).

The script's module is run as ``sweeps_promote`` (its ``if __name__ == "__main__"`` block does not run), so its
classes are defined without training anything. The input example is the first validation batch the script fed
its model during the trial (``_sweeps/examples.pt`` in every checkpoint).
"""

from __future__ import annotations

import ast
import os
import runpy
from dataclasses import dataclass
from typing import Any

from trainables.script.session import EXAMPLES_FILE, META_DIR, read_state
from trainables.script.spec import SPEC_KEY, ScriptSpec

MODEL_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt", "model.pth")


class CannotRebuild(RuntimeError):
    """The checkpoint holds weights but the adapter cannot rebuild the model that takes them."""


@dataclass(frozen=True)
class ScriptModel:
    """What the loader returns: a bare module (inputs as the script fed them) and the validation rows."""

    module: Any
    examples: tuple[Any, Any]


def validation_data(config: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Script trials carry their validation rows in the checkpoint (:class:`ScriptModel`'s ``examples``)."""
    raise CannotRebuild("a script trial's validation rows are in its checkpoint; load_model returns them")


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> ScriptModel:
    spec = ScriptSpec.from_dict(config[SPEC_KEY])
    state = read_state(checkpoint_dir)
    if not state:
        raise CannotRebuild(f"{checkpoint_dir} was not written by the script adapter")
    module = _rebuild(spec, checkpoint_dir, state, config)
    return ScriptModel(module.eval(), examples(checkpoint_dir))


def examples(checkpoint_dir: str) -> tuple[Any, Any]:
    import torch

    path = os.path.join(checkpoint_dir, META_DIR, EXAMPLES_FILE)
    if not os.path.isfile(path):
        raise CannotRebuild("the checkpoint holds no validation rows: the script never iterated a validation "
                            "loader of (inputs, targets) batches during the trial")
    data = torch.load(path, map_location="cpu", weights_only=True)
    return data["x"].numpy(), data["y"].numpy()


def script_globals(spec: ScriptSpec) -> dict[str, Any]:
    """The script's module namespace, its ``__main__`` block not run."""
    if spec.path is None:
        import importlib

        return vars(importlib.import_module(str(spec.entry).partition(":")[0]))
    if not os.path.isfile(spec.path):
        raise CannotRebuild(f"script {spec.path} is not here: promote where the project folder is")
    import sys

    folder = os.path.dirname(os.path.abspath(spec.path))
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(spec.path, run_name="sweeps_promote")
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)


def _rebuild(spec: ScriptSpec, folder: str, state: dict[str, Any], config: dict[str, Any]) -> Any:
    import torch

    if spec.framework == "hf":
        return _hf(os.path.join(folder, str(state.get("resume") or "checkpoint")))
    if not spec.model_class and not spec.model_build:
        raise CannotRebuild(f"{spec.name}: the scaffold found no model class; set trainable.script.model_build "
                            f"(e.g. \"Net(hidden=config['hidden'])\")")
    g = script_globals(spec)
    if spec.framework == "lightning":
        ckpt = torch.load(os.path.join(folder, str(state.get("resume") or "model.ckpt")), map_location="cpu",
                          weights_only=True)
        cls = g.get(str(spec.model_class))
        if cls is None:
            raise CannotRebuild(f"{spec.name} defines no class {spec.model_class!r}")
        model = cls(**dict(ckpt.get("hyper_parameters") or {}))
        model.load_state_dict(ckpt["state_dict"])
        return model
    model = _build(spec, g, config)
    weights = _weights(folder, spec.saved_file)
    model.load_state_dict({k.removeprefix("module."): v for k, v in weights.items()})
    return model


def _build(spec: ScriptSpec, g: dict[str, Any], config: dict[str, Any]) -> Any:
    """``model_build`` evaluated over the script's names and ``config``: only a call of a class the script
    defines (or imports), with literal or ``config[...]`` arguments."""
    text = spec.model_build or f"{spec.model_class}()"
    tree = ast.parse(text, mode="eval")
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id not in g:
        raise CannotRebuild(f"trainable.script.model_build: {text!r} is not a call of a class {spec.name} defines")
    values = {k: v for k, v in config.items() if not k.startswith("_")}

    def arg(node: ast.expr) -> Any:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "config":
            key = ast.literal_eval(node.slice)
            if key not in values:
                raise CannotRebuild(f"trainable.script.model_build: {text!r} reads config[{key!r}], which the "
                                    f"trial's values lack")
            return values[key]
        return ast.literal_eval(node)

    try:
        args = [arg(a) for a in call.args]
        kwargs = {k.arg: arg(k.value) for k in call.keywords if k.arg}
    except ValueError:
        raise CannotRebuild(f"trainable.script.model_build: {text!r}: arguments must be literals or "
                            f"config['key']") from None
    return g[call.func.id](*args, **kwargs)


def _weights(folder: str, saved_file: str | None) -> dict[str, Any]:
    import torch

    names = (saved_file, *MODEL_FILES) if saved_file else MODEL_FILES
    for name in names:
        for root, _dirs, files in sorted(os.walk(folder)):
            if name in files:
                path = os.path.join(root, str(name))
                if path.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return load_file(path)
                data = torch.load(path, map_location="cpu", weights_only=True)
                return data.get("model", data) if isinstance(data, dict) and "model" in data else data
    raise CannotRebuild(f"the checkpoint holds none of {', '.join(n for n in names if n)}: name the file the "
                        f"script saves its state dict to in trainable.script.saved_file")


def _hf(folder: str) -> Any:
    import torch
    from transformers import AutoModelForSequenceClassification

    if not os.path.isdir(folder):
        raise CannotRebuild(f"the checkpoint holds no Hugging Face checkpoint folder ({folder})")
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    pad = model.config.pad_token_id

    class TokenClassifier(torch.nn.Module):
        """Token ids (as numbers) in, class logits out; padding ids are masked, as the script's collator did."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any) -> Any:
            ids = ids.long()
            mask = (ids != pad).long() if pad is not None else torch.ones_like(ids)
            return self.model(input_ids=ids, attention_mask=mask).logits

    return TokenClassifier()
