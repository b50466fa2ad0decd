"""The script's syntax tree, indexed (imports, classes, functions, calls), and the small readers of its nodes."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

DEPTH = 4  # how many assignments, returns and calls a value is followed through

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_NOT_LITERAL: Any = object()


# --- small readers -------------------------------------------------------------------------------------------------
def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _literal(node: ast.AST | None) -> Any:
    """``ast.literal_eval`` of ``node``, or ``_NOT_LITERAL``."""
    if node is None:
        return _NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except Exception:  # ValueError, TypeError, RecursionError...: any of them means "not a literal"
        return _NOT_LITERAL


def _or_none(value: Any) -> Any:
    return None if value is _NOT_LITERAL else value


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    """The argument at ``index``, else the keyword ``name``."""
    return call.args[index] if len(call.args) > index else _kw(call, name)


def _last(expr: ast.AST | None) -> str | None:
    """``x`` of ``x`` and of ``a.b.x``."""
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None


def _text(node: ast.AST, limit: int = 80) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # a tree too deep to unparse
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _value_kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str"}.get(type(value), "other")


def _choices(node: ast.AST | None) -> tuple[Any, ...] | None:
    value = _literal(node)
    if isinstance(value, list | tuple):
        return tuple(value)
    if isinstance(value, set | frozenset):
        return tuple(sorted(value, key=repr))
    return None


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


# --- the source, indexed -------------------------------------------------------------------------------------------
class _Source:
    """A parsed script: its imports (local name -> dotted name), classes, functions and calls in source order."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        nodes = list(ast.walk(tree))
        self.parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
        self.import_statements = sorted((n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)), key=_line)
        self.imports: dict[str, tuple[str, ast.Import | ast.ImportFrom]] = {}
        for statement in self.import_statements:
            for local, dotted in _bindings(statement):
                self.imports.setdefault(local, (dotted, statement))
        self.classes: dict[str, ast.ClassDef] = {}
        self.functions: dict[str, _Function] = {}
        for node in sorted((n for n in nodes if isinstance(n, ast.ClassDef | _Function)), key=_position):
            table: dict[str, Any] = self.classes if isinstance(node, ast.ClassDef) else self.functions
            table.setdefault(node.name, node)
        self.calls = sorted((n for n in nodes if isinstance(n, ast.Call)), key=_position)
        self.names = [n for n in nodes if isinstance(n, ast.Name | ast.Attribute)]

    def qualname(self, expr: ast.AST | None) -> str | None:
        """The dotted name ``expr`` stands for, through the imports: ``pl.Trainer`` -> ``lightning.pytorch.Trainer``."""
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        root = self.imports[expr.id][0] if expr.id in self.imports else expr.id
        return ".".join([root, *reversed(parts)])

    def import_of(self, expr: ast.AST) -> tuple[ast.Import | ast.ImportFrom | None, str]:
        """The import statement that binds the root name of ``expr``, and that name."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id not in self.imports:
            return None, ""
        return self.imports[expr.id][1], expr.id

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) ``node`` is in."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, _Function):
            parent = self.parents.get(parent)
        return parent if parent is not None else self.tree

    def assigned(self, name: str, scope: ast.AST) -> list[ast.expr]:
        """The values ``name = ...`` assigns in ``scope``, in source order."""
        out: list[tuple[tuple[int, int], ast.expr]] = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                out.append((_position(node), node.value))
            elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
                  and node.value is not None):
                out.append((_position(node), node.value))
        return [value for _, value in sorted(out, key=lambda pair: pair[0])]

    def subclasses(self, cls: ast.ClassDef, base_name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``cls`` derives from a class whose last name is ``base_name``, through the script's classes."""
        for base in cls.bases:
            last = _last(base)
            if last == base_name:
                return True
            inner = self.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
            if inner is not None and inner is not cls and self.subclasses(inner, base_name, seen | {last or ""}):
                return True
        return False


def _bindings(statement: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            yield (alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0], alias.name.split(".")[0])
        return
    module = "." * statement.level + (statement.module or "")
    for alias in statement.names:
        if alias.name != "*":
            yield alias.asname or alias.name, f"{module}.{alias.name}" if module else alias.name


def _modules(statement: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names]
    return [statement.module] if statement.module and not statement.level else []


def _where(statement: ast.Import | ast.ImportFrom, keep: Any = None) -> str:
    """``import lightning.pytorch as pl (line 3)``: the statement with only the aliases ``keep(alias)`` accepts
    (all of them when it accepts none)."""
    names = [a for a in statement.names if keep is None or keep(a)] or statement.names
    shown = ast.Import(names=names) if isinstance(statement, ast.Import) else \
        ast.ImportFrom(module=statement.module, names=names, level=statement.level)
    return f"{_text(shown, 100)} (line {_line(statement)})"
