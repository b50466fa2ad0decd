"""The options an HfArgumentParser reads: its dataclasses' fields and TrainingArguments' knobs, as Params."""

from __future__ import annotations

import ast
from typing import Any

from sweeps.ops.scriptscan.annotations import _annotation_kind
from sweeps.ops.scriptscan.nodes import _arg, _choices, _kw, _last, _line, _literal, _or_none, _Source, _str, _text
from sweeps.ops.scriptscan.result import Param

# transformers.TrainingArguments: the knobs a sweep turns, with transformers' defaults
TRAINING_ARGUMENTS: tuple[tuple[str, str, Any], ...] = (
    ("learning_rate", "float", 5e-5), ("weight_decay", "float", 0.0), ("warmup_ratio", "float", 0.0),
    ("num_train_epochs", "float", 3.0), ("per_device_train_batch_size", "int", 8), ("seed", "int", 42),
    ("output_dir", "str", None), ("resume_from_checkpoint", "str", None))


def _is_training_arguments(qualname: str | None) -> bool:
    return bool(qualname) and str(qualname).rsplit(".", 1)[-1].endswith("TrainingArguments")


def _training_arguments() -> dict[str, Param]:
    """The knobs the installed transformers' ``TrainingArguments`` has (a release drops some: 5.x has no
    ``warmup_ratio``), with its defaults; the table's own where transformers is not installed."""
    installed = _installed_training_arguments()
    out = {}
    for name, kind, default in TRAINING_ARGUMENTS:
        if installed is not None:
            if name not in installed:
                continue
            default = installed[name] if installed[name] is not None or default is None else default
        out[name] = Param(name, f"--{name}", kind, default, None, f"TrainingArguments.{name} (transformers' default)")
    return out


def _installed_training_arguments() -> dict[str, Any] | None:
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    try:
        from transformers import TrainingArguments
    except Exception:  # a broken install: the table stands
        return None
    return {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(TrainingArguments)}


def _field_value(value: ast.expr | None) -> tuple[Any, tuple[Any, ...] | None, bool]:
    """A dataclass field's default, its metadata choices, and whether it is an ``__init__`` field."""
    if value is None:
        return None, None, True
    if isinstance(value, ast.Call) and _last(value.func) == "field":
        metadata = _kw(value, "metadata")
        choices = next((_choices(v) for k, v in zip(metadata.keys, metadata.values, strict=True)
                        if _str(k) == "choices"), None) if isinstance(metadata, ast.Dict) else None
        return _or_none(_literal(_kw(value, "default"))), choices, _literal(_kw(value, "init")) is not False
    return _or_none(_literal(value)), None, True


def _field_param(owner: str, statement: ast.stmt) -> Param | None:
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
        return None
    if "ClassVar" in _text(statement.annotation):
        return None
    kind, choices = _annotation_kind(statement.annotation)
    default, field_choices, init = _field_value(statement.value)
    name = statement.target.id
    return Param(name, f"--{name}", kind, default, choices or field_choices,
                 f"{owner}.{name} (line {_line(statement)})") if init else None


def _dataclass_params(src: _Source, cls: ast.ClassDef, seen: frozenset[str]) -> dict[str, Param]:
    """A script dataclass's fields, its script bases' (and TrainingArguments' knobs) first."""
    out: dict[str, Param] = {}
    for base in cls.bases:
        inner = src.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
        if inner is not None:
            out.update(_dataclass_params(src, inner, seen | {inner.name}))
        elif _is_training_arguments(src.qualname(base)):
            out.update(_training_arguments())
    for statement in cls.body:
        param = _field_param(cls.name, statement)
        if param is not None:
            out[param.name] = param
    return out


def _hf_params(src: _Source, call: ast.Call) -> tuple[list[Param], list[str]]:
    types = _arg(call, 0, "dataclass_types")
    if types is None:
        return [], [f"HfArgumentParser (line {_line(call)}) is given no dataclasses sweeps can read"]
    params: dict[str, Param] = {}
    problems: list[str] = []
    for node in types.elts if isinstance(types, ast.Tuple | ast.List) else [types]:
        cls = src.classes.get(node.id) if isinstance(node, ast.Name) else None
        if cls is not None:
            params.update({k: v for k, v in _dataclass_params(src, cls, frozenset({cls.name})).items()
                           if k not in params})
        elif _is_training_arguments(src.qualname(node)):
            params.update({k: v for k, v in _training_arguments().items() if k not in params})
        else:
            problems.append(f"HfArgumentParser's {_text(node)} is not a dataclass of the script: its fields are "
                            "not listed")
    return list(params.values()), problems
