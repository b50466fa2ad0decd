"""Name rules shared by config validation and the CLI."""

from __future__ import annotations

import re

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
ALIAS = re.compile(r"^[A-Za-z0-9_\-]{1,255}$")


def alias_errors(key: str, alias: str) -> list[str]:
    """Problems with a registry alias (MLflow's rule: letters, digits, _ and -)."""
    if ALIAS.match(alias):
        return []
    return [f"{key}: {alias[:80]!r} is not a valid alias; use letters, digits, _ or - (e.g. champion)"]


def model_name_errors(key: str, name: str) -> list[str]:
    """Problems with a Model Registry name: empty, path-like, or odd characters."""
    if not name or not name.strip():
        return [f"{key}: the model name is empty; give one like 'digits-mlp'"]
    if "/" in name or "\\" in name or ".." in name or name.startswith("."):
        return [f"{key}: {name!r} looks like a path; a model name is a plain name like 'digits-mlp'"]
    if not MODEL_NAME.match(name):
        return [f"{key}: {name!r} may only hold letters, digits, _ . - (at most 100 characters)"]
    return []
