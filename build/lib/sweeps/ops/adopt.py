"""``sweeps new trainable NAME --from pkg.module:function``: the files that sweep a training function as it is.

The function stays in its module, untouched. What the files need is read from its source, never by importing
it (:mod:`sweeps.config.loopsource`):

- the metrics it hands ``ray.train.report`` -> ``trainable.metrics``, and the sweep's metric and mode (a loss is
  minimised); when they cannot be read, the bundled loop's names stay, marked as a guess (a sweep whose metric
  the first real report lacks then stops at once and names what the loop did report);
- the config keys it reads with their defaults -> ``trainable.params``; the usual knobs among them (``lr``...)
  -> the search space;
- the file it saves in each checkpoint and the network it builds -> ``trainables/NAME.py``: ``build_model``,
  the ``load_model`` that ``sweeps promote`` reads a checkpoint with, and a ``validation_data`` to fill in.

The experiment allows exactly the function's module (``security.allowed_targets``): the narrowest entry. A
module inside a package that may never be allowed (:mod:`sweeps.config.trust`) is refused before anything is
written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sweeps.config import contract, loopsource, trust
from sweeps.errors import BadInput

KNOBS = {"lr": "{dist: loguniform, low: 1.0e-4, high: 1.0e-1}",
         "learning_rate": "{dist: loguniform, low: 1.0e-4, high: 1.0e-1}",
         "weight_decay": "{dist: loguniform, low: 1.0e-6, high: 1.0e-2}",
         "dropout": "{dist: uniform, low: 0.0, high: 0.5}",
         "momentum": "{dist: uniform, low: 0.5, high: 0.99}"}
GUESSED_METRICS = "[val/loss, val/acc, epoch]"

STUB = '''"""{name}: how `sweeps promote` reads a checkpoint of {source}.

Made by `python -m sweeps new trainable {name} --from {source}`, from the loop's source (the loop stays in
{module}, untouched): check build_model against the network the loop trains, and return held-out data from
validation_data.
"""

from __future__ import annotations

import os
from typing import Any

CHECKPOINT_FILE = "{saved}"  # {saved_how}


def build_model(config: dict[str, Any]) -> Any:
    """The network {function} trains ({model_how})."""
{build}


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """What `sweeps promote` reads a checkpoint with: the state dict the loop saved, into build_model(config)."""
    import torch

    state = torch.load(os.path.join(checkpoint_dir, CHECKPOINT_FILE), map_location="cpu", weights_only=True)
    state = {{k.removeprefix("module."): v for k, v in state.items()}}  # saved from a DDP-wrapped model
    net = build_model(config)
    net.load_state_dict(state)
    return net.eval()


def validation_data() -> tuple[Any, Any]:
    """Held-out inputs (rows x features, as the network takes them) and their targets: what `sweeps promote`
    scores the registered model on."""
    raise NotImplementedError("trainables/{name}.py: return (inputs, targets) held out from training")
'''


@dataclass(frozen=True)
class Adopted:
    """The texts that differ from a scaffold of the bundled loop."""

    loop: str
    stub: str
    metrics: str
    params: str
    space: str
    objective: str
    security: str


def allowed_module(source: str) -> tuple[str, str]:
    """(module, function) of ``--from``; BadInput when the module lies in a package no one may allow."""
    module, _, function = source.replace(":", ".").rpartition(".")
    why = trust.refused(module)
    if why:
        raise BadInput(f"--from: {source!r} lies in {module!r}, which may never be allowed as a target ({why}); "
                       f"sweep a function of your own package")
    return module, function


def adopt(name: str, source: str) -> Adopted:
    """What ``new trainable NAME --from SOURCE`` writes besides the search-space header and the files' layout."""
    module, function = allowed_module(source)
    try:
        text = loopsource.read(module)
        metrics = loopsource.reported_metrics(text, function)
        reads, saved = loopsource.config_reads(text, function), loopsource.saved_file(text, function)
        build, why = loopsource.model_code(text, function, module), "none found in its source"
    except Exception as exc:  # unreadable: every guess stays, each marked as one
        metrics, reads, saved, build, why = [], {}, None, None, f"{type(exc).__name__}: {exc}"
    chosen = contract.objective(metrics)
    return Adopted(
        loop=f"{module}.{function}",
        stub=STUB.format(name=name, source=source, module=module, function=function, saved=saved or "model.pt",
                         saved_how="read from the loop's torch.save" if saved else "a guess: the loop's source "
                         "names no file it saves; write the one its checkpoints hold",
                         model_how="read from its source: check it" if build else "not readable from its source: "
                         "write it", build=_indent(build or [f'raise NotImplementedError("trainables/{name}.py: '
                                                              f'build the network {function} trains")'])),
        metrics=(f"[{', '.join(metrics)}]  # read from what {function} hands ray.train.report" if metrics else
                 f"{GUESSED_METRICS}  # a guess: could not read the names {function} reports ({why}); list them"),
        params=_params(reads, function),
        space=_space(reads, function),
        objective=(f"  metric: {chosen[0]}  # read from {function}'s reports\n  mode: {chosen[1]}\n"
                   if chosen else ""),
        security=f"\nsecurity:\n  allowed_targets: [{module}]  # the module --from points into, nothing more\n",
    )


def _indent(lines: list[str]) -> str:
    return "\n".join(f"    {line}" for line in lines)


def _params(reads: dict[str, object], function: str) -> str:
    known = {k: v for k, v in reads.items() if v is not None}
    lines = [f"\n  {k}: {json.dumps(v)}" for k, v in known.items()]
    if "epochs" not in known:
        lines.append(f"\n  epochs: 5  # sweeps counts each trial's reports against this; {function} does not "
                     f"read it with a default")
    unset = [k for k in reads if k not in known and k != "epochs"]
    if unset:
        lines.append(f"\n  # {function} reads these without a default: {', '.join(unset)} (set them here or in "
                     f"the search space)")
    return "".join(lines)


def _space(reads: dict[str, object], function: str) -> str:
    header = f"# The search space of {function}: edit freely (python -m sweeps run --help lists the dists).\n"
    knobs = [f"{k}: {v}\n" for k, v in KNOBS.items() if k in reads]
    if knobs:
        return header + "".join(knobs)
    return (header + f"# {function} reads none of {', '.join(KNOBS)} from its config: search what it reads\n"
            f"lr: {KNOBS['lr']}\n")
