"""The ``_target_`` allowlist, applied to every target anywhere in a config by what it resolves to.

Every ``_target_`` (in mappings, lists, ``_args_``, at any depth) and every dotted setting
(``trainable.loop``/``builder``/``datasets``) is resolved by :func:`sweeps.config.targets.resolve`: the
string is checked against the allowed packages before anything is imported, then each module on the way and
the final object's defining module. Hydra's reserved keys (``_partial_``, ``_recursive_``, ``_convert_``,
``_args_``) must have their documented types, and look-alike keys (``_target``, ``__target__``) are refused.
``security.allowed_targets`` (from files under the conf directory) and ``$SWEEPS_ALLOWED_TARGETS`` may add
packages, but never one that loads or runs code (:mod:`sweeps.config.trust`).

Redaction lives in :mod:`sweeps.config.redaction` (re-exported here for older callers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sweeps.config.redaction import REDACTED, is_secret_key, redact, scrub  # noqa: F401
from sweeps.config.targets import CONVERT, DOTTED, TargetRefused, resolve
from sweeps.config.trust import refused

# What the bundled configs need, and no more: not all of `sweeps` (its ops write crontabs), not all of
# `optuna` (its storages open databases and files anywhere), not all of `ray.tune`.
ALLOWED_TARGET_PREFIXES: tuple[str, ...] = (
    "trainables",
    "ray.tune.search",
    "ray.tune.schedulers",
    "sweeps.execution.tuning.promotion",  # the project's own schedulers (promotion ASHA, PASHA), nothing else
    "optuna.samplers",
    "optuna.pruners",
    "hyperopt.tpe",
    "hyperopt.rand",
    "hyperopt.anneal",
    "torch.optim",
)
HYDRA_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")


def iter_targets(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(key, target)`` for every ``_target_`` in a nested config (mappings and lists, any depth)."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            key = f"{path}.{k}" if path else str(k)
            if k == "_target_":
                yield key, v
            else:
                yield from iter_targets(v, key)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from iter_targets(v, f"{path}[{i}]")


def _reserved_errors(node: Any, path: str = "") -> list[str]:
    """Hydra's reserved keys with the wrong type, and look-alikes of them, anywhere in the config."""
    errors: list[str] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            key = f"{path}.{k}" if path else str(k)
            name = str(k)
            if name in HYDRA_KEYS:
                errors += _reserved_value(name, v, key)
            elif name.startswith("_") and name.strip("_").lower() in ("target", "args", "partial", "recursive",
                                                                        "convert"):
                errors.append(f"{key}: looks like Hydra's {'_' + name.strip('_') + '_'!r} but is not; "
                              f"remove it (only the exact reserved keys are understood)")
            errors += _reserved_errors(v, key)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            errors += _reserved_errors(v, f"{path}[{i}]")
    return errors


def _reserved_value(name: str, value: Any, key: str) -> list[str]:
    if name in ("_partial_", "_recursive_") and not isinstance(value, bool):
        return [f"{key}: must be true or false, got {value!r}"]
    if name == "_convert_" and value not in CONVERT:
        return [f"{key}: must be one of {', '.join(CONVERT)}, got {value!r}"]
    if name == "_args_" and not isinstance(value, list | tuple):
        return [f"{key}: must be a list of positional arguments, got {type(value).__name__}"]
    return []


def extra_errors(extra: Iterable[Any], key: str = "security.allowed_targets") -> list[str]:
    """Allowlist additions must be package names, and never one that loads or runs code (``trust.NEVER``)."""
    errors = []
    for i, e in enumerate(extra):
        where = f"{key}[{i}]"
        if not isinstance(e, str) or not DOTTED.match(e):
            errors.append(f"{where}: {e!r} is not a package name like mypkg or mypkg.search")
        elif why := refused(e):
            errors.append(f"{where}: {e!r} may never be allowed ({why}); name your own package, e.g. "
                          f"mypkg.search")
    return errors


def prefixes(extra: Iterable[str] = ()) -> tuple[str, ...]:
    return (*ALLOWED_TARGET_PREFIXES, *(e for e in extra if isinstance(e, str)))


def check_targets(cfg: Mapping[str, Any], extra: Iterable[str] = ()) -> list[str]:
    """Problems for every ``_target_`` that resolves outside the allowed packages (plus ``extra`` ones)."""
    allowed = prefixes(extra)
    errors = _reserved_errors(cfg)
    for key, target in iter_targets(cfg):
        try:
            resolve(target, allowed)
        except TargetRefused as exc:
            text = _advice(exc)
            errors.append(f"{key}: target {text}" if text.startswith("'") else f"{key}: {text}")
    return errors


def _advice(exc: TargetRefused) -> str:
    text = str(exc)
    if text.endswith(")") and "is outside the allowed packages" in text:
        text += "; add its package to security.allowed_targets if you trust it"
    return text


def check_dotted(key: str, value: str, extra: Iterable[str] = ()) -> list[str]:
    """The same rule for plain dotted-path settings such as ``trainable.loop``."""
    try:
        resolve(value, prefixes(extra))
    except TargetRefused as exc:
        return [f"{key}: {_advice(exc)}"]
    return []
