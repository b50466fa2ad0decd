"""What the script adapter knows about a user's script: the plain data the driver hands every Train worker.

Built by the driver from the validated ``trainable.script`` config (``sweeps.config.sections.trainable``) and
carried in the loop's config under :data:`SPEC_KEY`; free of Hydra, MLflow and ``sweeps``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SPEC_KEY = "_sweeps_script"
FRAMEWORKS = ("lightning", "hf", "accelerate", "torch")
# the framework -> the module that must import for it, and the extra that installs it
NEEDS = {"lightning": ("lightning", "lightning"), "hf": ("transformers", "hf"),
         "accelerate": ("accelerate", "accelerate"), "torch": ("torch", None)}


@dataclass(frozen=True)
class ScriptSpec:
    """A script and how to call it.

    ``flags`` maps a config key to the option that takes its value (``{"lr": "--lr", "batch_size":
    "--batch-size"}``); ``switches`` a config key to an option given alone when the value is true
    (``store_true``), or when it is false if the option is written ``!--no-x`` (``store_false``). ``output``,
    ``resume`` and ``lr`` name config keys: the option pointed at the trial's own folder, the option that takes
    the checkpoint to resume from, and the optimizer's learning rate (applied again after a restore).
    """

    framework: str
    path: str | None = None  # the script file (absolute), run as `python PATH ARGS`
    entry: str | None = None  # or "pkg.module:function", called with sys.argv set
    args: tuple[str, ...] = ()  # the fixed part of the command line
    flags: Mapping[str, str] = field(default_factory=dict)
    switches: Mapping[str, str] = field(default_factory=dict)
    output: str | None = None
    resume: str | None = None
    lr: str | None = None
    epochs: str | None = None  # the config key of the script's epoch option (the budget)
    metric: str = ""
    model_class: str | None = None  # promotion: the LightningModule / nn.Module class the script defines
    model_build: str | None = None  # promotion: "Net(hidden=config['hidden'])", for torch and accelerate
    saved_file: str | None = None  # promotion: the state-dict file a torch script saves ("model.pt")
    digest: str = ""  # sha256 of the script's text when the sweep was composed
    source: str | None = None  # the script's text, for a node that does not have the project folder

    @property
    def name(self) -> str:
        """How the script is named in messages: its file or its entry point."""
        return self.path or self.entry or "the script"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["args"] = list(self.args)
        out["flags"], out["switches"] = dict(self.flags), dict(self.switches)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptSpec:
        d = dict(data)
        d["args"] = tuple(d.get("args") or ())
        d["flags"], d["switches"] = dict(d.get("flags") or {}), dict(d.get("switches") or {})
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def options(self) -> set[str]:
        """The config keys that reach the script's command line."""
        return set(self.flags) | set(self.switches)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spell(value: Any) -> str:
    """A config value as a command line spells it: ``True``/``False`` (HfArgumentParser's bools), floats that
    ``float()`` reads back exactly, lists as JSON (LightningCLI's form)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    return str(value)


def argv(spec: ScriptSpec, config: Mapping[str, Any], *, output_dir: str | None,
         resume_from: str | None) -> list[str]:
    """``sys.argv`` for one run of the script: its name, the fixed arguments, then each config key the script
    takes, in the parser's own spelling (the last occurrence of an option wins, as in argparse)."""
    values = dict(config)
    if spec.output and output_dir is not None:
        values[spec.output] = output_dir
    out = [spec.path or spec.entry or "script", *spec.args]
    for key, flag in spec.flags.items():
        if key == spec.resume:
            continue
        value = values.get(key)
        if value is not None:
            out += [flag, spell(value)]
    for key, flag in spec.switches.items():
        if key == spec.resume or key not in values:
            continue
        inverted = flag.startswith("!")
        if bool(values[key]) != inverted:
            out.append(flag.lstrip("!"))
    if resume_from is not None and spec.resume:
        if spec.resume in spec.switches:
            out.append(spec.switches[spec.resume].lstrip("!"))
        else:
            out += [spec.flags[spec.resume], resume_from]
    return out
