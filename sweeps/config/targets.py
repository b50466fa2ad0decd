"""Resolving dotted paths and ``_target_`` nodes, and checking their arguments before anything starts."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from sweeps.errors import BadInput

RESERVED = {"_target_", "name", "_partial_", "_convert_", "_recursive_", "_args_"}
# Arguments the tuner supplies itself (so they are not listed as ones a user should set).
SUPPLIED = {"metric", "mode", "points_to_evaluate", "max_concurrent", "random_state", "hyperparam_mutations"}


def import_dotted(path: str) -> Any:
    """``pkg.module.attr`` (or ``pkg.module:attr``) -> the attribute."""
    module, _, attr = path.replace(":", ".").rpartition(".")
    return getattr(importlib.import_module(module), attr)


def argument_errors(node: Mapping[str, Any], key: str) -> list[str]:
    """Arguments in a ``_target_`` node that the target does not take (checked before anything starts)."""
    try:
        target = import_dotted(str(node["_target_"]))
    except (ImportError, AttributeError, ValueError) as exc:
        return [f"{key}._target_: cannot import {node.get('_target_')!r} ({exc})"]
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    errors = []
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        allowed = [n for n, p in params.items() if n not in ("self", "args", "kwargs")
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        for arg in sorted(set(node) - RESERVED):
            if arg not in params:
                known = ", ".join(a for a in allowed if a not in SUPPLIED) or "(none)"
                errors.append(f"{key}.{arg}: {str(node['_target_']).rsplit('.', 1)[-1]} takes no argument "
                              f"{arg!r}; its arguments: {known}")
    for arg, value in node.items():
        if isinstance(value, dict) and "_target_" in value:
            errors += argument_errors(value, f"{key}.{arg}")
    return errors


def check_arguments(searcher: Mapping[str, Any], scheduler: Mapping[str, Any]) -> None:
    """Raise BadInput when the searcher or scheduler config has arguments its class does not take."""
    errors = argument_errors(searcher, "searcher") + argument_errors(scheduler, "scheduler")
    if errors:
        raise BadInput(*errors)
