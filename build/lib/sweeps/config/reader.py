"""Typed reads out of the composed config that collect problems instead of raising at the first one."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

# MLflow's rules: names of params/metrics may hold alphanumerics, _ - . space / (and : in newer versions).
MLFLOW_NAME = re.compile(r"^[A-Za-z0-9_\-. /:]{1,250}$")
KINDS = {"int": "an integer", "num": "a finite number", "bool": "true or false", "str": "a non-empty string",
         "list": "a list", "map": "a mapping"}


def _is(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str) and value != ""
    if kind == "list":
        return isinstance(value, list | tuple)
    return isinstance(value, Mapping)


class Reader:
    """Reads typed values out of a plain dict; every problem goes to :attr:`errors`, naming its key."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.errors: list[str] = []

    def section(self, name: str) -> Mapping[str, Any]:
        node = self.cfg.get(name)
        if node is None:
            return {}
        if not isinstance(node, Mapping):
            self.errors.append(f"{name}: expected a mapping, got {node!r}")
            return {}
        return node

    def get(self, sec: str, key: str, kind: str, default: Any = ..., choices: tuple[str, ...] = ()) -> Any:
        """``cfg[sec][key]`` checked against ``kind`` (int, num, bool, str, list, map) and ``choices``.

        A missing key is an error unless ``default`` is given; a value of the wrong kind is an error and
        reads as the default (or None).
        """
        node = self.section(sec)
        full = f"{sec}.{key}"
        if key not in node or (node[key] is None and default is ...):
            if default is ...:
                self.errors.append(f"{full}: required")
            return None if default is ... else default
        value = node[key]
        if value is None and default is None:
            return None
        if not _is(kind, value):
            self.errors.append(f"{full}: must be {KINDS[kind]}, got {value!r}")
            return None if default is ... else default
        if choices and value not in choices:
            self.errors.append(f"{full}: {value!r} is not allowed; choose one of {', '.join(choices)}")
        return value

    def amounts(self, key: str, node: Mapping[str, Any]) -> dict[str, float]:
        """A resource mapping (``{CPU: 1, GPU: 0.5}``): every amount a number >= 0."""
        out: dict[str, float] = {}
        for res, amount in dict(node).items():
            if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
                self.errors.append(f"{key}.{res}: must be a number >= 0, got {amount!r}")
            else:
                out[str(res)] = float(amount)
        return out


def mlflow_name_errors(key: str, name: str) -> list[str]:
    """Problems with a metric or param name that MLflow would reject."""
    if MLFLOW_NAME.match(name) and ".." not in name and not name.startswith("/"):
        return []
    return [f"{key}: {name!r} is not a valid MLflow metric/param name (letters, digits, _ - . space / : ; "
            f"at most 250 characters; no '..' and no leading '/')"]
