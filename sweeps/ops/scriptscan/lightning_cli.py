"""The options a ``LightningCLI(Model, Data)`` reads (its classes' ``__init__`` parameters) and its subcommand."""

from __future__ import annotations

import ast

from sweeps.ops.scriptscan.annotations import _annotation_kind
from sweeps.ops.scriptscan.nodes import _arg, _Function, _kw, _line, _literal, _or_none, _Source, _text, _value_kind
from sweeps.ops.scriptscan.result import Param


def _init_params(src: _Source, cls: ast.ClassDef, seen: frozenset[str]) -> list[tuple[str, Param]]:
    """(parameter name, Param without its final name and flag) for each ``__init__`` parameter but self."""
    init = next((s for s in cls.body if isinstance(s, _Function) and s.name == "__init__"), None)
    if init is None:
        for base in cls.bases:
            inner = src.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
            if inner is not None:
                return _init_params(src, inner, seen | {inner.name})
        return []
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = [*list(zip(positional, defaults, strict=True))[1:], *zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    out: list[tuple[str, Param]] = []
    for arg, default_node in pairs:
        default = _or_none(_literal(default_node))
        kind, choices = _annotation_kind(arg.annotation) if arg.annotation else (_value_kind(default) or "other", None)
        where = f"{cls.name}.__init__({arg.arg}) (line {_line(arg)})"
        out.append((arg.arg, Param(arg.arg, "", kind, default, choices, where)))
    return out


def _cli_params(src: _Source, call: ast.Call) -> tuple[list[Param], list[str], str | None]:
    """The options ``LightningCLI(Model, Data)`` reads, problems, and its subcommand (None with run=False)."""
    groups: list[tuple[str, list[tuple[str, Param]]]] = []
    problems: list[str] = []
    for group, node in (("model", _arg(call, 0, "model_class")), ("data", _arg(call, 1, "datamodule_class"))):
        cls = src.classes.get(node.id) if isinstance(node, ast.Name) else None
        if cls is not None:
            groups.append((group, _init_params(src, cls, frozenset({cls.name}))))
        elif node is not None:
            problems.append(f"LightningCLI's {group} class {_text(node)} is not defined in the script: its "
                            f"--{group}.* options are not listed")
        elif group == "model":
            problems.append(f"LightningCLI (line {_line(call)}) is given no model class: its --model.* options "
                            "are not listed")
    seen: dict[str, int] = {}
    for _, params in groups:
        for bare in dict.fromkeys(bare for bare, _ in params):
            seen[bare] = seen.get(bare, 0) + 1
    out = [Param(f"{group}_{bare}" if seen[bare] > 1 else bare, f"--{group}.{bare}", p.kind, p.default, p.choices,
                 p.where) for group, params in groups for bare, p in params]
    name = "max_epochs" if "max_epochs" not in {p.name for p in out} else "trainer_max_epochs"
    out.append(Param(name, "--trainer.max_epochs", "int", None, None, "LightningCLI trainer.max_epochs"))
    if _literal(_kw(call, "run")) is False:
        return out, problems, None
    problems.append("LightningCLI runs a subcommand: the script is run as `python script.py fit --model.lr ...`, "
                    "`fit` one of the FIXED ARGS")
    return out, problems, "fit"
