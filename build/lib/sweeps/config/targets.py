"""Resolving dotted paths and ``_target_`` nodes inside the allowlist, checking their arguments, building them.

A dotted path is walked the way Hydra's ``_locate`` walks it (import the first part, then ``getattr`` each
next part, importing ``a.b.c`` as a module only when ``a.b`` has no attribute ``c``), so what is checked is
what would run. :func:`resolve` checks the path string against the allowed packages *before* importing
anything, then checks every object met on the way: a module must be inside an allowed package (or be a
parent package of one, under its own name), and the final object's defining module must be inside one too,
and never inside a package whose members load or run code (:data:`sweeps.config.trust.NEVER`), whatever the
allowed packages say. So ``trainables.common.os.system`` (the ``os`` module reached through an allowed one)
is refused, and so is ``sweeps.ops.run.os.system`` even where ``sweeps.ops`` were allowed.

:func:`build` instantiates a ``_target_`` node with the same resolver (no Hydra, no re-resolution of
``${...}`` in values): what was checked is exactly what is called.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import re
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from sweeps.config.trust import never
from sweeps.errors import BadInput

RESERVED = {"_target_", "name", "_partial_", "_convert_", "_recursive_", "_args_"}
CONVERT = ("none", "partial", "object", "all")
# Arguments the tuner supplies itself (so they are not listed as ones a user should set).
SUPPLIED = {"metric", "mode", "points_to_evaluate", "max_concurrent", "random_state", "hyperparam_mutations"}
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
MAX_PATH = 300


class TargetRefused(ValueError):
    """A dotted path that is malformed, outside the allowed packages, or not importable."""


def inside(name: str, prefixes: Iterable[str]) -> bool:
    """Whether the dotted ``name`` is one of ``prefixes`` or below one (``optuna_evil`` is not ``optuna``)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _parent_of_allowed(name: str, prefixes: Iterable[str]) -> bool:
    return any(p.startswith(name + ".") for p in prefixes)


def _parts(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise TargetRefused(f"{repr(path)[:80]} must be a dotted path string like pkg.module.Class, not a "
                            f"{type(path).__name__}")
    text = path.replace(":", ".")
    if len(text) > MAX_PATH or not DOTTED.match(text):
        raise TargetRefused(f"{path[:80]!r} is not a dotted path (letters, digits, _ and dots; at most "
                            f"{MAX_PATH} characters)")
    parts = text.split(".")
    if any(p.startswith("__") for p in parts):
        raise TargetRefused(f"{path!r} walks a dunder attribute; name a public class or function")
    return parts


def _step(obj: Any, parts: list[str], m: int) -> Any:
    """One step of Hydra's walk: ``getattr``, else import ``parts[:m+1]`` as a submodule."""
    try:
        return getattr(obj, parts[m])
    except AttributeError:
        if not isinstance(obj, ModuleType):
            raise TargetRefused(f"{'.'.join(parts[:m])!r} has no {parts[m]!r}") from None
    mod = ".".join(parts[:m + 1])
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        if exc.name != mod or hasattr(obj, "__path__"):  # a package without it, or a module that fails inside
            raise TargetRefused(f"cannot import module {mod!r} of {'.'.join(parts)!r} ({exc})") from None
        names = [n for n in dir(obj) if not n.startswith("_")]
        close = difflib.get_close_matches(parts[m], names, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(f'{obj.__name__}.{c}' for c in close)}?" if close else ""
        raise TargetRefused(f"module {obj.__name__!r} has no {parts[m]!r}{hint}") from None
    except Exception as exc:
        raise TargetRefused(f"cannot import module {mod!r} of {'.'.join(parts)!r} ({type(exc).__name__}: "
                            f"{exc})") from None


def _module_of(obj: Any) -> str:
    if isinstance(obj, ModuleType):
        return obj.__name__
    mod = getattr(obj, "__module__", None)
    return mod if isinstance(mod, str) else "(unknown)"


def resolve(path: Any, allowed: Iterable[str]) -> Any:
    """The object ``path`` names, if it and everything on the way to it lies inside ``allowed``.

    Raises:
        TargetRefused: saying which part left the allowed packages (nothing outside them is imported).
    """
    prefixes = tuple(allowed)
    parts = _parts(path)
    dotted = ".".join(parts)
    if not inside(dotted, prefixes):
        raise TargetRefused(f"{path!r} is outside the allowed packages ({', '.join(prefixes)})")
    try:
        obj: Any = importlib.import_module(parts[0])
    except Exception as exc:
        raise TargetRefused(f"cannot import module {parts[0]!r} of {path!r} ({type(exc).__name__}: {exc})"
                            ) from None
    for m in range(1, len(parts) + 1):
        so_far = ".".join(parts[:m])
        if m == len(parts) and (isinstance(obj, ModuleType) or not callable(obj)):
            raise TargetRefused(f"{path!r} is a {type(obj).__name__}, not a function or class")
        where = _module_of(obj)
        ok = inside(where, prefixes) or (isinstance(obj, ModuleType) and where == so_far
                                         and _parent_of_allowed(so_far, prefixes))
        if not ok:
            raise TargetRefused(f"{path!r} resolves through {so_far!r} to {where!r}, which is outside "
                                f"the allowed packages ({', '.join(prefixes)})")
        if m < len(parts):
            obj = _step(obj, parts, m)
    for where in _origins(obj):
        why = never(where)
        if why:
            raise TargetRefused(f"{path!r} is defined in {where!r}, which may never be a target ({why})")
    return obj


def _origins(obj: Any) -> list[str]:
    """Where ``obj`` says it is defined, and for a function where its code really lives (numpy and pandas set
    ``__module__`` to the package: ``pandas.read_pickle`` says ``pandas`` but lives in ``pandas.io.pickle``)."""
    out = [_module_of(obj)]
    try:
        inner = inspect.unwrap(obj)
    except ValueError:  # a __wrapped__ cycle
        inner = obj
    for o in (obj, inner):
        module = (getattr(o, "__globals__", None) or {}).get("__name__")
        out += [m for m in (module, _module_of(o)) if isinstance(m, str) and m not in out]
    return out


def locate(path: str) -> Any:
    """The object at a dotted path (Hydra's walk), without the allowlist: only for paths checked before."""
    parts = _parts(path)
    obj: Any = importlib.import_module(parts[0])
    for m in range(1, len(parts)):
        obj = _step(obj, parts, m)
    return obj


def import_dotted(path: str) -> Any:
    """``pkg.module.attr`` (or ``pkg.module:attr``) -> the attribute (walked as :func:`resolve` checks it)."""
    try:
        return locate(path)
    except TargetRefused as exc:
        raise ImportError(str(exc)) from None


def argument_errors(node: Mapping[str, Any], key: str, allowed: Iterable[str]) -> list[str]:
    """Arguments in a ``_target_`` node that the target does not take (checked before anything starts)."""
    try:
        target = resolve(node["_target_"], allowed)
    except TargetRefused as exc:
        return [f"{key}._target_: {exc}"]
    errors = []
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        names = [n for n, p in params.items() if n not in ("self", "args", "kwargs")
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        for arg in sorted(set(node) - RESERVED):
            if arg not in params:
                known = ", ".join(a for a in names if a not in SUPPLIED) or "(none)"
                errors.append(f"{key}.{arg}: {str(node['_target_']).rsplit('.', 1)[-1]} takes no argument "
                              f"{arg!r}; its arguments: {known}")
    for arg, value in node.items():
        if isinstance(value, dict) and "_target_" in value:
            errors += argument_errors(value, f"{key}.{arg}", allowed)
    return errors


def check_arguments(searcher: Mapping[str, Any], scheduler: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raise BadInput when the searcher or scheduler config has arguments its class does not take."""
    allowed = tuple(allowed)
    errors = argument_errors(searcher, "searcher", allowed) + argument_errors(scheduler, "scheduler", allowed)
    if errors:
        raise BadInput(*errors)


def build(node: Any, allowed: Iterable[str], key: str, **kwargs: Any) -> Any:
    """Instantiate a ``_target_`` node (``_args_``, ``_partial_``, nested nodes) through :func:`resolve`.

    ``kwargs`` are passed as they are (never instantiated). Refusals raise BadInput naming ``key``.
    """
    allowed = tuple(allowed)

    def value(v: Any, where: str) -> Any:
        if isinstance(v, Mapping):
            return make(v, where) if "_target_" in v else {k: value(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [value(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return v

    def make(n: Mapping[str, Any], where: str) -> Any:
        try:
            target = resolve(n["_target_"], allowed)
        except TargetRefused as exc:
            raise BadInput(f"{where}._target_: {exc}") from None
        recursive = n.get("_recursive_", True) is not False
        conv = (lambda v, w: value(v, w)) if recursive else (lambda v, w: v)
        args = [conv(a, f"{where}._args_[{i}]") for i, a in enumerate(n.get("_args_") or [])]
        kw = {k: conv(v, f"{where}.{k}") for k, v in n.items() if k not in RESERVED}
        if where == key:
            kw.update(kwargs)
        if n.get("_partial_") is True:
            return functools.partial(target, *args, **kw)
        return target(*args, **kw)

    return make(node, key)
