"""Security rules applied to configs: `_target_` allowlisting and secret redaction."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

ALLOWED_TARGET_PREFIXES: tuple[str, ...] = (
    "sweeps",
    "trainables",
    "ray.tune",
    "optuna",
    "hyperopt",
    "torch.optim",
)
SECRET_KEY = re.compile(r"(password|passwd|token|secret|api[_-]?key|access[_-]?key|private[_-]?key|credential|"
                        r"webhook)",
                        re.IGNORECASE)
REDACTED = "***REDACTED***"


def _allowed(target: str, prefixes: Iterable[str]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


def iter_targets(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(key, target)`` for every ``_target_`` in a nested config."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            key = f"{path}.{k}" if path else str(k)
            if k == "_target_":
                yield key, str(v)
            else:
                yield from iter_targets(v, key)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from iter_targets(v, f"{path}[{i}]")


def check_targets(cfg: Mapping[str, Any], extra: Iterable[str] = ()) -> list[str]:
    """Problems for every `_target_` outside the allowed packages (plus ``extra`` prefixes)."""
    prefixes = (*ALLOWED_TARGET_PREFIXES, *extra)
    return [
        f"{key}: target {target!r} is outside the allowed packages ({', '.join(prefixes)}); add its package "
        f"to security.allowed_targets if you trust it"
        for key, target in iter_targets(cfg)
        if not _allowed(target, prefixes)
    ]


def check_dotted(key: str, value: str, extra: Iterable[str] = ()) -> list[str]:
    """The same rule for plain dotted-path settings such as ``trainable.loop``."""
    prefixes = (*ALLOWED_TARGET_PREFIXES, *extra)
    if _allowed(value, prefixes):
        return []
    return [f"{key}: {value!r} is outside the allowed packages ({', '.join(prefixes)}); add its package to "
            f"security.allowed_targets if you trust it"]


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def redact(node: Any, secrets: set[str] | None = None) -> Any:
    """A copy of ``node`` with the values of secret-looking keys replaced, recursively.

    ``secrets`` collects the redacted values (so free text such as an error message can be scrubbed too).
    """
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            if is_secret_key(str(k)) and not isinstance(v, Mapping | list | tuple):
                if secrets is not None and v not in (None, ""):
                    secrets.add(str(v))
                out[k] = REDACTED if v not in (None, "") else v
            else:
                out[k] = redact(v, secrets)
        return out
    if isinstance(node, list | tuple):
        return [redact(v, secrets) for v in node]
    return node


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every known secret value inside free text."""
    for s in secrets:
        if len(s) >= 4:
            text = text.replace(s, REDACTED)
    return text
