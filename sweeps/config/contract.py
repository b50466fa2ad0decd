"""The trainable contract, checked before Ray starts: each dotted path imports and has the right signature.

``trainable.loop`` runs on every Train worker as ``loop(config)`` (or ``loop()``); ``trainable.builder`` and
``trainable.datasets`` are called as ``fn(config)``, ``trainable.load_model`` as ``fn(checkpoint_dir, config)``.
A typo or a wrong signature is refused with the key, the bad value and the closest names the module does
define, before any trial starts.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
from typing import Any

from sweeps.config import loopsource
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


def _imported(node: ast.stmt, name: str, is_package: bool) -> list[str]:
    """The modules an import statement of module ``name`` may name (``from a import b``: ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's own package
        parts = name.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join([*parts[:max(keep, 0)], *([node.module] if node.module else [])])
    return [base, *(f"{base}.{a.name}" for a in node.names)] if base else []


def _sources(path: str, depth: int = 2) -> tuple[str, list[str]]:
    """The source of the module ``path`` points into, and of the modules of its own package that it imports
    (read, never imported: :mod:`sweeps.config.loopsource`), plus a line for each that could not be read."""
    module_name = path.replace(":", ".").rpartition(".")[0]
    package = module_name.rpartition(".")[0] or module_name
    seen: set[str] = set()
    todo, out, problems = [(module_name, 0)], [], []
    while todo:
        name, level = todo.pop()
        if name in seen or not (name == module_name or name.startswith(package + ".")):
            continue
        seen.add(name)
        try:
            file = loopsource.locate(name)
            text = file.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except LookupError as exc:
            if name == module_name:  # `from pkg.mod import fn` also names pkg.mod.fn, which is no module
                problems.append(f"could not read the source of {name} ({exc})")
            continue
        except Exception as exc:  # unreadable, undecodable or unparsable: say so, never fail the dry run
            problems.append(f"could not read the source of {name} ({type(exc).__name__}: {exc})")
            continue
        out.append(text)
        if level < depth:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    todo += [(m, level + 1) for m in _imported(node, name, file.name == "__init__.py")]
    return "\n".join(out), problems


def features(t: TrainableCfg) -> list[tuple[str, bool | None, str]]:
    """What the trainable supports, read from its loop's source: ``(feature, supported, detail)``; supported is
    None where the source could not be read (one ``source`` line says why)."""
    if t.script:  # a script run by the adapter: what it gets depends on its framework, not on a loop's source
        from sweeps.config.sections import script

        return script.features(t.script)
    try:
        source, problems = _sources(t.loop)
    except Exception as exc:  # the contract check describes; it never stops a sweep
        source, problems = "", [f"could not read the source of {t.loop} ({type(exc).__name__}: {exc})"]
    out: list[tuple[str, bool | None, str]] = [("source", None, p) for p in problems]
    for name, (evidence, gives, add) in FEATURES.items():
        if not source:
            out.append((name, None, "not checked: the loop's source could not be read"))
            continue
        ok = any(e in source for e in evidence)
        out.append((name, ok, gives if ok else f"missing: {add}"))
    promotable = bool(t.load_model or t.builder)
    out.append(("promotion", promotable, "`promote` reads the checkpoint with trainable.load_model" if t.load_model
                else "`promote` rebuilds the model with trainable.builder from model.pt" if promotable else
                "missing: set trainable.load_model (load_model(checkpoint_dir, config) -> ServableModel)"))
    return out


def describe(t: TrainableCfg) -> list[str]:
    """The contract check, as the lines ``--dry-run`` prints."""
    marks = {True: "yes", False: "NO", None: "?"}
    return [f"{marks[ok]:<3} {name:<12} {detail}" for name, ok, detail in features(t)]


LOWER_IS_BETTER = ("loss", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl", "latency", "time", "cost",
                   "regret", "wer", "cer", "bpb", "bpc")
NOT_OBJECTIVES = ("epoch", "step", "iteration", "lr", "learning_rate")


def mode_of(metric: str) -> str:
    """``min`` for a metric whose name says lower is better (a loss, an error, a time), else ``max``."""
    return "min" if any(w in metric.lower() for w in LOWER_IS_BETTER) else "max"


def objective(metrics: list[str]) -> tuple[str, str] | None:
    """The metric a sweep most likely optimises among those a loop reports, and its mode: a validation loss
    first, then any loss, then a validation score, then the first that is not a counter (epoch, step, lr)."""
    names = [m for m in metrics if m.lower().rsplit("/", 1)[-1] not in NOT_OBJECTIVES]
    held_out = ("val", "valid", "eval", "test")
    ranked = sorted(names, key=lambda m: ("loss" not in m.lower(), not any(h in m.lower() for h in held_out)))
    return (ranked[0], mode_of(ranked[0])) if ranked else None
