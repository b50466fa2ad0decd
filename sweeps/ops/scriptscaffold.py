"""``sweeps new trainable NAME --script PATH [-- FIXED ARGS]``: the files that sweep a training script as it is.

The script stays where it is, untouched, and is read, never imported (:mod:`sweeps.ops.scriptscan`): its parser
gives the options (the usual knobs become the search space, the rest stay fixed at the script's defaults), the
calls it logs with give the metrics and the sweep's objective, its epoch option the budget, its output and
resume options where the adapter points them. Every value written says where it came from; what could not be
found is said in the files and on the console, with the one line to add.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.errors import BadInput

# name -> a range around the script's default (None: no default)
BATCH = ("batch_size", "per_device_train_batch_size", "train_batch_size")
WIDTH = ("hidden", "hidden_size", "hidden_dim", "width", "units")
FIXED_SPACES = {"weight_decay": "{dist: choice, values: [0.0, 0.01, 0.1]}",
                "warmup_ratio": "{dist: uniform, low: 0.0, high: 0.2}",
                "dropout": "{dist: uniform, low: 0.0, high: 0.5}",
                "momentum": "{dist: uniform, low: 0.5, high: 0.99}"}


@dataclass
class ScriptPlan:
    """The three files' texts and what the console says about them."""

    trainable: str
    space: str
    experiment: str
    notes: list[str] = field(default_factory=list)


def _yaml(value: Any) -> str:
    """A scalar as YAML reads it back (YAML 1.1 reads ``5e-05`` as a string: floats keep a point)."""
    if isinstance(value, float) and not isinstance(value, bool):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"
        return text
    return json.dumps(value) if value is not None else "null"


def _space_line(p: Any, lr_key: str | None) -> str | None:
    """A search range for one of the usual knobs, around the script's default."""
    d = p.default
    if p.name == lr_key or p.name in ("lr", "learning_rate"):
        base = float(d) if isinstance(d, int | float) and d > 0 else 1e-3
        return f"{{dist: loguniform, low: {base / 10:.1e}, high: {min(base * 10, 1.0):.1e}}}"
    if p.name in FIXED_SPACES and p.kind in ("float", "int"):
        return FIXED_SPACES[p.name]
    if (p.name in BATCH or p.name in WIDTH) and p.kind == "int" and isinstance(d, int) and d >= 2:
        return f"{{dist: choice, values: [{d // 2}, {d}, {d * 2}]}}"
    return None


@dataclass
class _Read:
    """What the scan gave, sorted for the files: the options by role, the fixed arguments, the notes."""

    scan: Any
    shown: str  # the script as the files name it
    fixed: list[str]
    roles: dict[str, Any]  # role (output, resume, lr, epochs) -> its Param
    flags: list[Any]
    switches: list[Any]
    metrics: list[str]
    notes: list[str]

    def key(self, role: str) -> str | None:
        p = self.roles.get(role)
        return p.name if p is not None else None


def plan(name: str, path: str, fixed: list[str], root: Path) -> ScriptPlan:
    """The files for script ``path`` (as given: relative to the project folder ``root``, or absolute)."""
    from sweeps.ops import scriptscan

    full = Path(path).expanduser()
    full = full if full.is_absolute() else (root / full)
    if full.suffix != ".py" or not full.is_file():
        raise BadInput(f"--script: {path!r} is not a Python file here ({full}); give the file you run as "
                       f"`python PATH ...`")
    scan = scriptscan.scan(full.read_text(encoding="utf-8", errors="replace"), str(full))
    _require(scan.framework, scan.framework_where)
    try:
        shown = os.path.relpath(full, root)
    except ValueError:
        shown = str(full)
    read = _sort(scan, shown if not shown.startswith("..") else str(full), list(fixed))
    _notes(read)
    space = _space(read)
    trainable = _trainable(name, path, read)
    experiment = _experiment(name, read)
    todo = "".join(f"# TO DO: {n}\n" for n in read.notes[1:])
    return ScriptPlan(trainable.replace("\nname: ", f"\n{todo}name: ", 1) if todo else trainable, space,
                      experiment, read.notes)


def _sort(scan: Any, shown: str, fixed: list[str]) -> _Read:
    notes = [f"{shown}: {scan.framework} ({scan.framework_where}); parser: {scan.parser or 'none'}"]
    if scan.framework == "hf" and not any(a.split("=")[0] in ("--eval_strategy", "--evaluation_strategy")
                                          for a in fixed):
        fixed += ["--eval_strategy", "epoch"]
        notes.append("added --eval_strategy epoch to the fixed arguments: the Trainer reports at each evaluation")
    if scan.subcommand and scan.subcommand not in fixed:  # LightningCLI: `python script.py fit --model.lr ...`
        fixed = [scan.subcommand, *fixed]
    taken = {a.split("=")[0] for a in fixed if a.startswith("-")}
    roles = {role: p for role, p in (("output", scan.output), ("resume", scan.resume), ("lr", scan.lr),
                                     ("epochs", scan.epochs)) if p is not None}
    return _Read(scan, shown, fixed, roles,
                 flags=[p for p in scan.params if p.kind != "switch" and p.flag not in taken],
                 switches=[p for p in scan.params if p.kind == "switch" and p.flag not in taken],
                 metrics=[m.name for m in scan.metrics], notes=notes)


def _notes(read: _Read) -> None:
    """What the scaffold could not find, each with what to do."""
    scan, shown, notes = read.scan, read.shown, read.notes
    ours = ("command-line options", "logs no metric", "nn.Module",  # said below, with the line to add
            "runs a subcommand")  # the scaffold puts it first in the fixed arguments
    notes += [p for p in scan.problems if not any(o in p for o in ours)]
    if scan.parser is None:
        notes.append(f"{shown} reads no command-line options sweeps can see (argparse, HfArgumentParser, "
                     f"LightningCLI): a sweep cannot vary anything. Give it an argparse parser (e.g. "
                     f"`parser.add_argument('--lr', type=float, default=0.01)`) and scaffold again")
    if not read.metrics:
        notes.append(f"{shown} logs no metric sweeps can see; add one line where it computes its validation "
                     f"figures each epoch: `import sweeps; sweeps.report({{'val_loss': val_loss}})` (a no-op "
                     f"outside a sweep), then set sweep.metric and trainable.metrics in the files below")
    if read.key("resume") is None and scan.framework in ("torch", "accelerate"):  # the others: the framework's
        notes.append("the script takes no resume option: a restarted trial starts its training afresh")
    promo = _promotion(scan)
    if promo:
        notes.append(promo)
    if read.key("epochs") is None:
        notes.append("no epoch option found (--epochs, --max-epochs, --num_train_epochs): set params.epochs "
                     "to the script's own epoch count (the schedulers' budget)")


def _space(read: _Read) -> str:
    lines = []
    for p in read.flags:
        line = _space_line(p, read.key("lr"))
        if line:
            lines.append(f"{p.name}: {line}  # {p.where}, default {p.default!r}")
    if not lines and read.flags:
        read.notes.append("none of the script's options is a usual knob (lr, batch size, width, dropout...): the "
                          "search space is empty; add the options to search")
    return (f"# The search space of {read.shown}: the usual knobs among its options, around its defaults.\n"
            + ("\n".join(lines) if lines else "{}") + "\n")


def _params(read: _Read) -> list[str]:
    """``trainable.params``: every option's default (the epoch option's as an int), and the epoch budget."""
    epochs_key, params = read.key("epochs"), []
    for p in read.flags:
        if p.name == epochs_key and p.default is None:
            params.append(f"  {p.name}: 10  # {p.where}: the script sets no default; the sweep's epoch budget")
            continue
        if p.name in (read.key("output"), read.key("resume")) or p.default is None:
            continue
        value = int(p.default) if p.name == epochs_key and isinstance(p.default, float) \
            and float(p.default).is_integer() else p.default
        params.append(f"  {p.name}: {_yaml(value)}  # {p.where}")
    if not epochs_key:
        params.append("  epochs: 10  # TO DO: the script's own epoch count (it takes no epoch option): the "
                      "schedulers' budget")
    elif epochs_key != "epochs" and any(p.name == epochs_key for p in read.flags):
        params.append(f"  epochs: ${{.{epochs_key}}}  # the budget the schedulers and the report count: "
                      f"the script's {read.roles['epochs'].flag}")
    params += [f"  {p.name}: {_yaml(bool(p.default))}  # {p.where} (a switch)" for p in read.switches
               if p.name != read.key("resume")]
    return params


def _opts(items: list[Any]) -> str:
    return "".join(f"\n    {p.name}: {_yaml(p.flag)}  # {p.where}" for p in items) or " {}"


def _build(scan: Any) -> str:
    if scan.framework in ("torch", "accelerate"):
        build = (f"\n  model_build: {_yaml(scan.model_build)}  # promotion builds this, then loads the state dict"
                 if scan.model_build else "")
        return build + (f"\n  saved_file: {_yaml(scan.saved_file)}" if scan.saved_file else "")
    if scan.framework == "lightning" and scan.model_class:
        return f"\n  model_class: {scan.model_class}  # the LightningModule promotion loads the checkpoint into"
    return ""


def _trainable(name: str, path: str, read: _Read) -> str:
    scan = read.scan
    roles = "".join(f"\n  {role}: {p.name}  # {p.where}" for role, p in read.roles.items())
    where = ", ".join(f"{m.name} ({m.where})" for m in scan.metrics) or "none found"
    command = shlex.join([path, *(["--", *read.fixed] if read.fixed else [])])
    params = "".join("\n" + p for p in _params(read))
    return f"""# The trainable {name}: your script {read.shown}, run unchanged on every Train worker
# (made by `python -m sweeps new trainable {name} --script {command}`).
# framework: {scan.framework} ({scan.framework_where}); metrics it logs: {where}
name: {name}
loop: trainables.script.train_loop
load_model: trainables.script.load_model  # promotion reads the checkpoint the {scan.framework} way
metrics: {json.dumps(read.metrics)}
num_workers: 2
use_gpu: false
pack: 1            # K > 1: K single-worker trials share each GPU (each keeps 1/K of its memory)
resources_per_worker: {{CPU: 1}}
placement_strategy: PACK
checkpoint_every: 1
script:
  path: {_yaml(read.shown)}  # relative to the project folder
  framework: {scan.framework}
  args: {json.dumps(read.fixed)}  # the fixed part of your command line
  flags:{_opts(read.flags)}
  switches:{_opts(read.switches)}{roles}{_build(scan)}
params:  # fixed values (the script's defaults); the search space overrides them{params}
"""


def _experiment(name: str, read: _Read) -> str:
    from sweeps.config.contract import mode_of, objective

    goal = objective(read.metrics) if read.metrics else None
    if goal:
        objective_text = f"  metric: {goal[0]}  # logged by the script; {goal[1]}imised\n  mode: {goal[1]}\n"
    elif read.metrics:
        objective_text = f"  metric: {read.metrics[0]}\n  mode: {mode_of(read.metrics[0])}\n"
    else:
        objective_text = "  # metric: (none found: see the trainable's header)\n"
    return f"""# @package _global_
# {name}: `python -m sweeps run +experiment={name}` (made by `python -m sweeps new trainable {name} --script ...`).
defaults:
  - override /trainable: {name}
  - override /search_space: {name}
  - override /scheduler: asha

sweep:
  name: {name}
  num_samples: 4
  max_concurrent_trials: 1  # each trial runs 2 Train workers
{objective_text}"""


def _promotion(scan: Any) -> str | None:
    """What promotion will lack, as the dry-run says it."""
    if scan.framework == "lightning" and not scan.model_class:
        return "promotion: no LightningModule class found; set trainable.script.model_class"
    if scan.framework in ("torch", "accelerate") and not scan.model_build:
        return ("promotion: the model the script builds was not found; set trainable.script.model_build, e.g. "
                "\"Net(hidden=config['hidden'])\"")
    return None


def _require(framework: str, where: str) -> None:
    from sweeps.config.sections.script import NEEDS, importable

    module, extra = NEEDS[framework]
    if not importable(module):
        raise BadInput(f"--script: a {framework} script ({where}) needs {module!r}, which this environment lacks; "
                       f"install it with pip install 'sweeps[{extra}]'")
