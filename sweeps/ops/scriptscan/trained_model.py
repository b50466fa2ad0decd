"""The model a script trains (its class, the call that builds it over the config) and the file it saves it to."""

from __future__ import annotations

import ast
from typing import Any

from sweeps.ops.scriptscan.nodes import _NOT_LITERAL, DEPTH, _arg, _last, _line, _literal, _Source, _str, _text
from sweeps.ops.scriptscan.result import Param

WRAPPERS = frozenset({"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "DataParallel",
                      "prepare", "prepare_model"})
MOVES = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train"})  # model.to(device) is model


# --- the model -----------------------------------------------------------------------------------------------------
def _args_names(src: _Source) -> set[str]:
    """The names bound to the parsed command line: ``args = parser.parse_args()``, ``args = parse_args()``..."""
    def parsed(expr: ast.expr | None, functions: set[str]) -> bool:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        return isinstance(expr, ast.Call) and (
            _last(expr.func) in ("parse_args", "parse_known_args", "parse_args_into_dataclasses")
            and isinstance(expr.func, ast.Attribute) or (isinstance(expr.func, ast.Name) and expr.func.id in functions))

    functions: set[str] = set()
    for name, function in src.functions.items():
        returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)]
        bound = _bound(function, lambda e: parsed(e, set()))
        if any(parsed(r, set()) or (isinstance(r, ast.Name) and r.id in bound) for r in returns):
            functions.add(name)
    return _bound(src.tree, lambda e: parsed(e, functions)) | {"args"}


def _bound(scope: ast.AST, test: Any) -> set[str]:
    """The names (also tuple-unpacked) assigned a value that passes ``test`` in ``scope``."""
    out: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and test(node.value):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
                out |= {e.id for e in elements if isinstance(e, ast.Name)}
    return out


def _construction(src: _Source, expr: ast.AST | None, scope: ast.AST, classes: set[str],
                  depth: int = 0) -> ast.Call | None:
    """The ``Net(...)`` call an expression handed to DDP/prepare stands for, through assignments and ``.to()``."""
    if expr is None or depth > DEPTH:
        return None
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id in classes:
            return expr
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in MOVES:
            return _construction(src, expr.func.value, scope, classes, depth + 1)
        return None
    if isinstance(expr, ast.Name):
        for value in src.assigned(expr.id, scope):
            found = _construction(src, value, scope, classes, depth + 1)
            if found is not None:
                return found
    return None


def _rebuild(expr: ast.expr, args: set[str], options: set[str]) -> str | None:
    """``expr`` as the config rebuilds it: literals kept, ``args.X`` -> ``config['X']``; None for anything else."""
    if _literal(expr) is not _NOT_LITERAL:
        return _text(expr, 10**6)
    if (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in args
            and expr.attr in options):
        return f"config[{expr.attr!r}]"
    if isinstance(expr, ast.List | ast.Tuple):
        parts = [_rebuild(e, args, options) for e in expr.elts]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(str(p) for p in parts)
        return f"[{inner}]" if isinstance(expr, ast.List) else f"({inner}{',' if len(parts) == 1 else ''})"
    return None


def _build(call: ast.Call, args: set[str], options: set[str]) -> str | None:
    """The construction call over the config: ``WineNet(hidden=config['hidden'])``; None if any part is not."""
    parts: list[str] = []
    for arg in call.args:
        part = None if isinstance(arg, ast.Starred) else _rebuild(arg, args, options)
        if part is None:
            return None
        parts.append(part)
    for keyword in call.keywords:
        value = _rebuild(keyword.value, args, options) if keyword.arg else None
        if value is None:
            return None
        parts.append(f"{keyword.arg}={value}")
    return f"{_last(call.func)}({', '.join(parts)})"


def _lightning_model(src: _Source) -> str | None:
    candidates = [name for name, cls in src.classes.items() if src.subclasses(cls, "LightningModule")]
    built = {c.func.id for c in src.calls if isinstance(c.func, ast.Name)}
    return next((c for c in candidates if c in built), candidates[0] if candidates else None)


def _torch_model(src: _Source, params: list[Param]) -> tuple[str | None, str | None, list[str]]:
    """The nn.Module the script trains, its build rewritten over the config, and problems."""
    classes = {name for name, cls in src.classes.items() if src.subclasses(cls, "Module")}
    construction = None
    for call in src.calls:
        if _last(call.func) in WRAPPERS:
            construction = next((found for a in call.args
                                 for found in [_construction(src, a, src.scope(call), classes)] if found), None)
            if construction is not None:
                break
    if construction is None and len(classes) == 1:
        only = next(iter(classes))
        construction = next((c for c in src.calls if isinstance(c.func, ast.Name) and c.func.id == only), None)
        if construction is None:
            return only, None, [f"sweeps found no call that builds the model {only}: write build_model(config)"]
    if construction is None:
        return None, None, ["sweeps found no nn.Module subclass the script trains: write build_model(config)"]
    name = str(_last(construction.func))
    build = _build(construction, _args_names(src), {p.name for p in params})
    if build is None:
        return name, None, [f"the model {name}(...) is built from values sweeps cannot rebuild "
                            f"(line {_line(construction)}): write build_model(config)"]
    return name, build, []


# --- the saved file ------------------------------------------------------------------------------------------------
def _file_name(src: _Source, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> str | None:
    """The base name of the file a path expression names: "model.pt" of os.path.join(d, "model.pt")."""
    if expr is None or depth > DEPTH:
        return None
    text = _str(expr)
    if text is not None:
        return text.replace("\\", "/").rsplit("/", 1)[-1] or None
    if isinstance(expr, ast.JoinedStr):
        tail = _str(expr.values[-1]) if expr.values else None
        if tail is not None and ("/" in tail or len(expr.values) == 1):
            return tail.rsplit("/", 1)[-1] or None
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return _file_name(src, expr.right, scope, depth + 1)
    if isinstance(expr, ast.Call) and _last(expr.func) in ("join", "joinpath", "Path", "str", "fspath") and expr.args:
        return _file_name(src, expr.args[-1], scope, depth + 1)
    if isinstance(expr, ast.Name):
        return next((n for v in reversed(src.assigned(expr.id, scope))
                     for n in [_file_name(src, v, scope, depth + 1)] if n), None)
    return None


def _state_dict(src: _Source, expr: ast.AST | None, scope: ast.AST) -> bool:
    if isinstance(expr, ast.Name):
        return any(_state_dict(src, v, scope) for v in src.assigned(expr.id, scope) if not isinstance(v, ast.Name))
    return isinstance(expr, ast.Call) and _last(expr.func) == "state_dict"


def _saved_file(src: _Source) -> str | None:
    found: list[tuple[bool, str]] = []
    for call in src.calls:
        receiver = _text(call.func.value) if isinstance(call.func, ast.Attribute) else ""
        if src.qualname(call.func) == "torch.save" or (_last(call.func) == "save" and receiver.endswith("accelerator")):
            scope = src.scope(call)
            name = _file_name(src, _arg(call, 1, "f"), scope)
            if name:
                found.append((_state_dict(src, _arg(call, 0, "obj"), scope), name))
    return next((name for state, name in found if state), found[0][1] if found else None)
