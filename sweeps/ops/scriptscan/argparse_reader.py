"""The options a script's argparse ``add_argument`` calls define, as Params."""

from __future__ import annotations

import ast
from typing import Any

from sweeps.ops.scriptscan.nodes import (
    _NOT_LITERAL,
    _choices,
    _kw,
    _last,
    _line,
    _literal,
    _or_none,
    _Source,
    _str,
    _value_kind,
)
from sweeps.ops.scriptscan.result import Param


def _type_kind(node: ast.expr | None, default: Any) -> str:
    name = _last(node)
    if node is None or name == "str":
        return _value_kind(default) or "str"
    if name in ("int", "float"):
        return name
    if name is not None and "bool" in name.lower():  # type=bool, type=str2bool: takes a value
        return "bool"
    return "other"


def _argparse_kind(call: ast.Call) -> tuple[str, Any]:
    """The kind and default of one ``add_argument`` call."""
    action_node = _kw(call, "action")
    action = _str(action_node)
    default = _literal(_kw(call, "default"))
    if action == "store_true":
        return "switch", False if default is _NOT_LITERAL else default
    if action == "store_false":
        return "switch_off", True if default is _NOT_LITERAL else default
    default = _or_none(default)
    nargs = _kw(call, "nargs")
    if (action_node is not None and action != "store") or (nargs is not None and _literal(nargs) != "?"):
        return "other", default  # append, count, store_const, BooleanOptionalAction, lists
    return _type_kind(_kw(call, "type"), default), default


def _argparse_param(call: ast.Call) -> tuple[Param | None, str | None]:
    """One ``add_argument`` call's Param, and a problem sentence (a positional, computed names)."""
    line = _line(call)
    strings = [_str(a) for a in call.args]
    names = [s for s in strings if s]
    if not names or len(names) < len(strings):
        return None, f"an add_argument call with computed option names (line {line}) was skipped"
    kind, default = _argparse_kind(call)
    choices = _choices(_kw(call, "choices"))
    dest = _str(_kw(call, "dest"))
    options = [s for s in names if s.startswith("-")]
    if not options:
        name = dest or names[0].replace("-", "_")
        where = f"argparse {names[0]} (line {line})"
        return (Param(name, "", kind, default, choices, where),
                f"the positional argument {names[0]} (line {line}) is passed as one of the FIXED ARGS, not swept")
    flag = next((o for o in options if o.startswith("--")), options[0])
    name = dest or flag.lstrip("-").replace("-", "_")
    return Param(name, flag, kind, default, choices, f"argparse {flag} (line {line})"), None


def _argparse_params(src: _Source) -> tuple[list[Param], list[str]]:
    params: list[Param] = []
    problems: list[str] = []
    for call in src.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            param, problem = _argparse_param(call)
            params += [param] if param is not None else []
            problems += [problem] if problem else []
    return params, problems
