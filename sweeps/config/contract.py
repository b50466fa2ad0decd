"""The trainable contract, checked before Ray starts: each dotted path imports and has the right signature.

``trainable.loop`` runs on every Train worker as ``loop(config)`` (or ``loop()``); ``trainable.builder`` and
``trainable.datasets`` are called as ``fn(config)``, ``trainable.load_model`` as ``fn(checkpoint_dir, config)``.
A typo or a wrong signature is refused with the key, the bad value and the closest names the module does
define, before any trial starts.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

from sweeps.config.spec import TrainableCfg
from sweeps.errors import BadInput

# key -> (how it is called, how many positional arguments it must take; the loop may take none)
ROLES = {"loop": ("loop(config) or loop() on every Train worker", 0),
         "builder": ("builder(config) -> nn.Module", 1),
         "load_model": ("load_model(checkpoint_dir, config) -> trainables.common.ServableModel | nn.Module", 2),
         "datasets": ("datasets(config) -> {name: ray.data.Dataset}", 1)}


def _resolve(key: str, path: str) -> tuple[Any, list[str]]:
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    if not module_name:
        return None, [f"{key}: {path!r} is not a dotted path; give package.module.function"]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module failed to import: say why
        return None, [f"{key}: cannot import module {module_name!r} of {path!r} ({type(exc).__name__}: {exc})"]
    if not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(f'{module_name}.{c}' for c in close)}?" if close else ""
        return None, [f"{key}: module {module_name!r} has no {attr!r}{hint}"]
    return getattr(module, attr), []


def _signature_errors(key: str, path: str, fn: Any, role: str, nargs: int) -> list[str]:
    if not callable(fn):
        return [f"{key}: {path!r} is a {type(fn).__name__}, not a function; it is called as {role}"]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    takes = len(positional) >= nargs or any(p.kind == p.VAR_POSITIONAL for p in params)
    if len(required) > max(nargs, 1) or not takes:
        return [f"{key}: {path!r} takes ({', '.join(p.name for p in params)}); it is called as {role}"]
    return []


def check_trainable(t: TrainableCfg) -> None:
    """Import ``trainable.loop``/``builder``/``load_model``/``datasets`` and check how they can be called.

    Raises:
        BadInput: naming each key whose path does not import or whose signature does not fit.
    """
    errors: list[str] = []
    for name, (role, nargs) in ROLES.items():
        path = getattr(t, name)
        if not path:
            continue
        key = f"trainable.{name}"
        fn, errs = _resolve(key, path)
        errors += errs or _signature_errors(key, path, fn, role, nargs)
    if errors:
        raise BadInput(*errors)


# feature -> (evidence in the loop's source, what it gives, what to add when it is missing)
FEATURES = {
    "resume": (("get_checkpoint(", "resume_checkpoint("), "PBT exploits, Tune retries and `sweeps resume` continue "
               "from a checkpoint", "call ray.train.get_checkpoint() at the start of the loop and restore from it"),
    "checkpoints": (("checkpoint=", "Checkpoint.from_directory", "save_checkpoint("), "PBT, retries and "
                    "promotion have checkpoints", "pass checkpoint=ray.train.Checkpoint.from_directory(dir) to "
                    "ray.train.report (rank 0)"),
    "data time": (("time/data_s", "Stopwatch("), "the report flags trials that wait on data", "report "
                  "time/data_s and time/compute_s (trainables.common.Stopwatch)"),
}


def _sources(path: str, depth: int = 2) -> str:
    """The source of the module ``path`` points into, and of the same package's modules it imports."""
    import ast
    import sys

    module_name = path.replace(":", ".").rpartition(".")[0]
    top = module_name.split(".")[0]
    seen, todo, out = set(), [(module_name, 0)], []
    while todo:
        name, level = todo.pop()
        if name in seen or name.split(".")[0] != top:
            continue
        seen.add(name)
        try:
            text = inspect.getsource(sys.modules.get(name) or importlib.import_module(name))
        except (ImportError, OSError, TypeError):
            continue
        out.append(text)
        if level < depth:
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and node.module:
                    todo += [(node.module, level + 1)] + [(f"{node.module}.{a.name}", level + 1) for a in node.names]
                elif isinstance(node, ast.Import):
                    todo += [(a.name, level + 1) for a in node.names]
    return "\n".join(out)


def features(t: TrainableCfg) -> list[tuple[str, bool, str]]:
    """What the trainable supports, read from its loop's source: ``(feature, supported, detail)``."""
    source = _sources(t.loop)
    out = []
    for name, (evidence, gives, add) in FEATURES.items():
        ok = any(e in source for e in evidence)
        out.append((name, ok, gives if ok else f"missing: {add}"))
    promotable = bool(t.load_model or t.builder)
    out.append(("promotion", promotable, "`promote` reads the checkpoint with trainable.load_model" if t.load_model
                else "`promote` rebuilds the model with trainable.builder from model.pt" if promotable else
                "missing: set trainable.load_model (load_model(checkpoint_dir, config) -> ServableModel)"))
    return out


def describe(t: TrainableCfg) -> list[str]:
    """The contract check, as the lines ``--dry-run`` prints."""
    return [f"{'yes' if ok else 'NO ':<3} {name:<12} {detail}" for name, ok, detail in features(t)]
