"""A training loop's source, read without running it: its file, the metrics it reports, what it reads and builds.

``sweeps new trainable --from`` and the contract check read a user's loop before anything imports it: the
module's file is found the way ``import`` finds it (each finder on ``sys.meta_path``, one dotted part at a time,
no package's ``__init__`` executed), then parsed with :mod:`ast`. What cannot be read is a ``LookupError`` or
``OSError``/``SyntaxError`` for the caller to turn into a line of text; nothing here runs the user's code.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEPTH = 4  # how many assignments, returns and local calls a report's argument is followed through


def _find(name: str, path: Sequence[str] | None) -> Any:
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find(name, path) if find is not None else None
        except Exception:  # a finder that cannot answer for this name: ask the next one, as import does
            continue
        if spec is not None:
            return spec
    return None


def locate(module: str) -> Path:
    """The ``.py`` file of ``module``, found without importing it or its packages.

    Raises:
        LookupError: naming the dotted part that is not there, or a module without a source file.
    """
    parts, path, spec = module.split("."), None, None
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        spec = _find(name, path)
        if spec is None:
            raise LookupError(f"no module {name!r} on this Python's path")
        path = spec.submodule_search_locations
        if path is None and i < len(parts) - 1:
            raise LookupError(f"{name!r} is a module, not a package holding {parts[i + 1]!r}")
    origin = getattr(spec, "origin", None)
    if not origin or not str(origin).endswith(".py"):
        raise LookupError(f"{module!r} has no Python source file ({origin or 'a namespace package'})")
    return Path(origin)


def read(module: str) -> str:
    """The source text of ``module`` (``LookupError``/``OSError`` when it cannot be read)."""
    return locate(module).read_text(encoding="utf-8")


def function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level function ``name``."""
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name),
                None)


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _called(node: ast.Call, name: str) -> bool:
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name)


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


class _Keys:
    """The string keys a dict-valued expression can hold, followed through a function's assignments, the
    returns of the module's functions and ``dict(...)`` calls."""

    def __init__(self, functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]) -> None:
        self.functions = functions

    def of(self, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> list[str]:
        if expr is None or depth > DEPTH:
            return []
        if isinstance(expr, ast.Dict):
            return [k for key, value in zip(expr.keys, expr.values, strict=True)
                    for k in ([_str(key)] if key is not None else self.of(value, scope, depth + 1)) if k]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            if expr.func.id == "dict":
                return [*(k for a in expr.args for k in self.of(a, scope, depth + 1)),
                        *(kw.arg for kw in expr.keywords if kw.arg),
                        *(k for kw in expr.keywords if not kw.arg for k in self.of(kw.value, scope, depth + 1))]
            fn = self.functions.get(expr.func.id)
            if fn is not None:
                return [k for r in ast.walk(fn) if isinstance(r, ast.Return) for k in self.of(r.value, fn, depth + 1)]
        if isinstance(expr, ast.Name):
            return self._name(expr.id, scope, depth)
        return []

    def _name(self, name: str, scope: ast.AST, depth: int) -> list[str]:
        out: list[str] = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                out += self.of(node.value, scope, depth + 1)
            elif isinstance(node, ast.Assign):  # metrics["val/loss"] = ...
                out += [k for t in node.targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                        and t.value.id == name for k in [_str(t.slice)] if k]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == name):
                out += [*(k for a in node.args for k in self.of(a, scope, depth + 1)),
                        *(kw.arg for kw in node.keywords if kw.arg)]
        return out


def reported_metrics(source: str, loop: str) -> list[str]:
    """The metric names function ``loop`` hands ``*.report(...)``, in order, read from ``source``: dict literals,
    ``dict(k=...)``, a variable assigned one (or filled key by key), a module function returning one; the loop's
    own calls first, else those of the module functions it calls. Empty when they cannot be read."""
    tree = ast.parse(source)
    functions = _functions(tree)
    fn = functions.get(loop)
    if fn is None:
        return []
    keys = _Keys(functions)
    callees = [functions[c.func.id] for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
               and c.func.id in functions and c.func.id != loop]
    for scopes in ([fn], callees):
        found: list[str] = []
        for scope in scopes:
            for call in (c for c in ast.walk(scope) if isinstance(c, ast.Call) and _called(c, "report")):
                arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "metrics"), None)
                found += keys.of(arg, scope)
        if found:
            return list(dict.fromkeys(found))
    return []


def config_reads(source: str, loop: str) -> dict[str, Any]:
    """``{key: default}`` for each ``config.get("key", literal)`` (``None`` for ``config["key"]``) in ``loop``,
    where ``config`` is the loop's first parameter."""
    fn = function(ast.parse(source), loop)
    if fn is None or not fn.args.args:
        return {}
    cfg, out = fn.args.args[0].arg, dict[str, Any]()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == cfg and node.args):
            key = _str(node.args[0])
            if key is not None:
                try:
                    out.setdefault(key, ast.literal_eval(node.args[1]) if len(node.args) > 1 else None)
                except ValueError:  # a computed default
                    out.setdefault(key, None)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == cfg:
            key = _str(node.slice)
            if key is not None:
                out.setdefault(key, None)
    return out


def saved_file(source: str, loop: str) -> str | None:
    """The file name the loop's ``torch.save(..., os.path.join(dir, "NAME"))`` writes into its checkpoints."""
    fn = function(ast.parse(source), loop)
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Call) and _called(node, "save") and len(node.args) > 1:
            names = [s for c in ast.walk(node.args[1]) for s in [_str(c)] if s and "." in s]
            if names:
                return names[-1]
    return None


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Module-level names -> the line that gives them to another module (its imports, its own defs)."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.update({(a.asname or a.name.split(".")[0]): ast.unparse(ast.Import(names=[a])) for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.update({(a.asname or a.name): ast.unparse(ast.ImportFrom(module=node.module, names=[a], level=0))
                        for a in node.names})
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            out[node.name] = f"from {module} import {node.name}"
    return out


def model_code(source: str, loop: str, module: str) -> list[str] | None:
    """The body of a ``build_model(config)`` that builds the network ``loop`` trains: the expression it hands
    ``prepare_model`` (or last assigned to the name it hands it), the loop's assignments that expression uses,
    and the module imports both need. None when they use anything else (a dataset, a variable from a loop)."""
    import builtins

    tree = ast.parse(source)
    fn = function(tree, loop)
    call = next((c for c in ast.walk(fn) if isinstance(c, ast.Call) and _called(c, "prepare_model") and c.args),
                None) if fn is not None and fn.args.args else None
    if fn is None or call is None:
        return None
    cfg, line = fn.args.args[0].arg, call.lineno
    assigned: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node)
    imports, needed, lines = _imports(tree, module), [], {}  # lines: the loop's assignments, by line
    known: set[str] = {cfg, *dir(builtins)}

    def need(expr: ast.AST, before: int, depth: int) -> bool:
        for name in sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - known):
            earlier = [a for a in assigned.get(name, []) if a.lineno < before]
            known.add(name)
            if earlier and depth < DEPTH and need(earlier[-1].value, earlier[-1].lineno, depth + 1):
                lines[earlier[-1].lineno] = ast.unparse(earlier[-1])
            elif name in imports:
                needed.append(imports[name])
            else:
                return False
        return True

    expr: ast.AST = call.args[0]
    if isinstance(expr, ast.Name):
        earlier = [a for a in assigned.get(expr.id, []) if a.lineno < line]
        if not earlier:
            return None
        expr, line = earlier[-1].value, earlier[-1].lineno
    if not need(expr, line, 0):
        return None
    head = [f"{cfg} = config"] if cfg != "config" else []
    return [*needed, *head, *(lines[k] for k in sorted(lines)), f"return {ast.unparse(expr)}"]
