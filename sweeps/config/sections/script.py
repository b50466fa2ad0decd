"""``trainable.script``: a user's training script as a trial's loop (the script adapter, docs/scripts.md).

Checked before Ray starts: the file exists (a path relative to the project folder, the current directory), the
framework is one the adapter knows and is installed (else the extra to install), every option key names an
option of the script, and every searched parameter reaches the script's command line (a value the script
never reads would make every trial the same). The result is the adapter's ``ScriptSpec`` as a plain dict,
with the script's text, so a node without the project folder can run it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from sweeps.config.reader import Reader

KEYS = ("path", "entry", "framework", "args", "flags", "switches", "output", "resume", "lr", "epochs",
        "model_class", "model_build", "saved_file")
ROLES = ("output", "resume", "lr", "epochs")
PASSED = ("seed", "checkpoint_every", "cpus_per_worker")  # keys the loop gets that no script option takes
# The adapter's own names (trainables.script.spec), written out here because the config layer does not import
# the bundled trainables; tests/test_scripts.py holds the two to one table.
SPEC_KEY = "_sweeps_script"  # the loop config's key of the script's spec
FRAMEWORKS = ("lightning", "hf", "accelerate", "torch")
NEEDS = {"lightning": ("lightning", "lightning"), "hf": ("transformers", "hf"),
         "accelerate": ("accelerate", "accelerate"), "torch": ("torch", None)}  # module to import, extra


def digest(text: str) -> str:
    """The script's text as the sweep composed it (sha256, 16 hex digits)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse(r: Reader, node: Any) -> dict[str, Any] | None:
    """The validated ``trainable.script`` as ``ScriptSpec`` fields, or None when absent (errors in ``r``)."""
    if node is None:
        return None
    if not isinstance(node, Mapping):
        r.errors.append(f"trainable.script: expected a mapping (path, framework, flags...), got {node!r}")
        return None
    errors: list[str] = []
    unknown = sorted(set(map(str, node)) - set(KEYS))
    if unknown:
        errors.append(f"trainable.script: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(KEYS)}")
    framework = node.get("framework")
    if framework not in FRAMEWORKS:
        errors.append(f"trainable.script.framework: {framework!r}; use one of {', '.join(FRAMEWORKS)}")
    else:
        module, extra = NEEDS[framework]
        if not importable(module):
            how = f"pip install 'sweeps[{extra}]'" if extra else f"pip install {module}"
            errors.append(f"trainable.script.framework: {framework} scripts need {module!r}, which this "
                          f"environment lacks; install it with {how}")
    path, entry, source = node.get("path"), node.get("entry"), None
    if (path is None) == (entry is None):
        errors.append("trainable.script: give path (the file you run) or entry (pkg.module:function), not both")
    elif path is not None:
        path, source, problem = _script_file(path)
        if problem:
            errors.append(problem)
        elif isinstance(node, dict):
            node["path"] = path  # the stored config names the file itself: promote, resume from any folder
    elif not isinstance(entry, str) or ":" not in entry:
        errors.append(f"trainable.script.entry: {entry!r}; give pkg.module:function (it parses sys.argv)")
    args = node.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
        errors.append(f"trainable.script.args: {args!r}; give the fixed command-line arguments as a list")
        args = []
    flags, switches = _options(errors, node, "flags"), _options(errors, node, "switches")
    both = sorted(set(flags) & set(switches))
    if both:
        errors.append(f"trainable.script: {', '.join(both)} is both a flag and a switch; keep one")
    for role in ROLES:
        key = node.get(role)
        if key is not None and key not in flags and key not in switches:
            errors.append(f"trainable.script.{role}: {key!r} is not one of the script's options "
                          f"({', '.join(sorted({**flags, **switches})) or 'none'})")
    for key in ("model_class", "model_build", "saved_file"):
        if node.get(key) is not None and not isinstance(node.get(key), str):
            errors.append(f"trainable.script.{key}: {node.get(key)!r}; give a string")
    r.errors += errors
    if errors:
        return None
    return {"framework": framework, "path": path, "entry": entry, "args": [str(a) for a in args], "flags": flags,
            "switches": switches, **{k: node.get(k) for k in (*ROLES, "model_class", "model_build", "saved_file")},
            "digest": digest(source) if source is not None else "", "source": source}


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails to import, or a module blocked in sys.modules
        return False


def _script_file(path: Any) -> tuple[str, str | None, str | None]:
    if not isinstance(path, str) or not path:
        return str(path), None, f"trainable.script.path: {path!r}; give the script's file"
    full = os.path.abspath(os.path.expanduser(path))
    if not full.endswith(".py"):
        return full, None, f"trainable.script.path: {path!r} is not a Python file (.py)"
    try:
        with open(full, encoding="utf-8") as f:
            return full, f.read(), None
    except OSError as exc:
        return full, None, (f"trainable.script.path: cannot read {path!r} ({exc.strerror or exc}); a relative "
                            f"path is read from the project folder ({os.getcwd()})")


def _options(errors: list[str], node: Mapping[str, Any], key: str) -> dict[str, str]:
    value = node.get(key) or {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) and v.lstrip("!").startswith("-")
                                                 for v in value.values()):
        errors.append(f"trainable.script.{key}: {value!r}; map each config key to its option "
                      f"({{lr: --lr, batch_size: --batch-size}})")
        return {}
    return {str(k): str(v) for k, v in value.items()}


def space_errors(script: Mapping[str, Any] | None, space_cfg: Mapping[str, Any],
                 mutations: Mapping[str, Any] | None = None, metrics: tuple[str, ...] = ()) -> list[str]:
    """Every searched (or mutated) parameter must reach the script's command line; a script must take options
    and log a metric sweeps can see."""
    if script is None:
        return []
    options = set(script["flags"]) | set(script["switches"])
    name = script.get("path") or script.get("entry")
    errors = []
    if not options:
        errors.append(f"trainable.script.flags: {name} reads no command-line option sweeps can see, so a sweep "
                      f"cannot vary anything; give it a parser, e.g. `parser = argparse.ArgumentParser(); "
                      f"parser.add_argument('--lr', type=float, default=0.01); args = parser.parse_args()`, "
                      f"then run `sweeps new trainable NAME --script {name}` again")
    if not metrics:
        errors.append(f"trainable.metrics: {name} logs no metric sweeps can see; add one line where it computes "
                      f"its validation figures each epoch: `import sweeps; sweeps.report({{'val_loss': val_loss}})` "
                      f"(a no-op outside a sweep), then list it here and set sweep.metric")
    for name in [*space_cfg, *(mutations or {})]:
        if name not in options and name not in PASSED:
            errors.append(f"search_space.{name}: {script.get('path') or script.get('entry')} takes no option for "
                          f"{name!r}; its options: {', '.join(sorted(options)) or 'none'} (add one under "
                          f"trainable.script.flags, or search one of these)")
    return errors


REPORTS = {"lightning": "one per training epoch: Lightning's callback metrics (self.log), with trainer.save_checkpoint",
           "hf": "one per evaluation: the Trainer's logs (eval_*), with its checkpoint folder",
           "torch": "one per pass over the training data: what it logs (mlflow, add_scalar, sweeps.report), with "
                    "its output folder",
           "accelerate": "one per pass over the training data: what it logs (accelerator.log, mlflow, "
                         "sweeps.report), with its saved state"}


def features(script: Mapping[str, Any]) -> list[tuple[str, bool | None, str]]:
    """What a script trainable gets, as the dry-run's contract lines: ``(feature, supported, detail)``."""
    fw, name = script["framework"], script.get("path") or script.get("entry")
    out: list[tuple[str, bool | None, str]] = [("script", True, f"{name} ({fw}) runs unchanged on every Train "
                                                                f"worker"), ("reports", True, REPORTS[fw])]
    if fw in ("lightning", "hf"):
        out.append(("resume", True, "PBT exploits, retries and `sweeps resume` continue through the framework's "
                                    "own resume (ckpt_path / resume_from_checkpoint)"))
    elif script.get("resume"):
        out.append(("resume", True, f"the script resumes through its option for {script['resume']!r}"))
    else:
        out.append(("resume", False, "missing: the script takes no resume option, so a restarted trial trains "
                                     "from scratch; add one (e.g. --resume PATH) and name it trainable.script.resume"))
    if fw == "hf":
        out.append(("promotion", True, "`promote` loads the checkpoint with from_pretrained (sequence "
                                       "classification)"))
    elif fw == "lightning":
        ok = bool(script.get("model_class"))
        out.append(("promotion", ok, f"`promote` loads the checkpoint into {script.get('model_class')}" if ok else
                    "missing: set trainable.script.model_class (the LightningModule the script defines)"))
    else:
        ok = bool(script.get("model_build"))
        out.append(("promotion", ok, f"`promote` builds {script.get('model_build')} and loads the saved state "
                                     f"dict" if ok else "missing: set trainable.script.model_build, e.g. "
                                                        "\"Net(hidden=config['hidden'])\""))
    return out
