"""The kind (and ``Literal`` choices) a type annotation gives: HF dataclass fields, LightningCLI ``__init__``s."""

from __future__ import annotations

import ast
from typing import Any

from sweeps.ops.scriptscan.nodes import DEPTH, _last, _literal, _str, _value_kind


def _annotation_kind(annotation: ast.expr | None, depth: int = 0) -> tuple[str, tuple[Any, ...] | None]:
    """The kind an annotation gives, and a ``Literal[...]``'s values as choices."""
    if annotation is None or depth > DEPTH:
        return "other", None
    text = _str(annotation)
    if text is not None:  # a string annotation: "int"
        try:
            return _annotation_kind(ast.parse(text, mode="eval").body, depth + 1)
        except SyntaxError:
            return "other", None
    if isinstance(annotation, ast.Name | ast.Attribute):
        last = _last(annotation)
        return (last, None) if last in ("int", "float", "str", "bool") else ("other", None)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union([annotation.left, annotation.right], depth)
    if isinstance(annotation, ast.Subscript):
        head, inner = _last(annotation.value), annotation.slice
        if head == "Optional":
            return _annotation_kind(inner, depth + 1)
        if head == "Union":
            return _union(inner.elts if isinstance(inner, ast.Tuple) else [inner], depth)
        if head == "Literal":
            values = _literal(inner)
            values = values if isinstance(values, tuple) else (values,)
            kinds = {_value_kind(v) for v in values}
            return (kinds.pop() or "other") if len(kinds) == 1 else "other", values
    return "other", None


def _union(members: list[ast.expr], depth: int) -> tuple[str, tuple[Any, ...] | None]:
    flat: list[ast.expr] = []
    for member in members:  # X | Y | None nests to the left
        if isinstance(member, ast.BinOp) and isinstance(member.op, ast.BitOr):
            flat += [member.left, member.right]
        else:
            flat.append(member)
    rest = [m for m in flat if not (isinstance(m, ast.Constant) and m.value is None) and _last(m) != "None"]
    return _annotation_kind(rest[0], depth + 1) if len(rest) == 1 else ("other", None)
