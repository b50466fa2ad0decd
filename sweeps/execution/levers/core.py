"""What a lever is, and the one decision per process whether it is used (version checked, surfaces present)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import pkgutil
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

log = logging.getLogger(__name__)

TEST_RAY_VERSION = "SWEEPS_TEST_RAY_VERSION"  # tests: pretend another Ray version (every Ray lever off)
OFF = "SWEEPS_LEVERS_OFF"  # "all", or lever names separated by commas: their public fallbacks run

DISTRIBUTIONS = {"ray": "ray", "optuna": "optuna", "hydra": "hydra-core", "torch": "torch"}


@dataclass(frozen=True)
class Lever:
    """One private surface and what stands in for it.

    ``checked``: version prefixes of ``package`` whose source the lever was read against (and its tests ran on).
    ``probe``: returns why the surfaces are not as the lever calls them (a name gone, a parameter renamed), or
    None; it may import the private modules, never change anything.
    """

    name: str
    package: str
    checked: tuple[str, ...]
    what: str
    fallback: str
    probe: Callable[[], str | None]


def installed(package: str) -> str:
    """The installed version of ``package`` (``ray``: or the one a test pretends), "" if it is not installed."""
    if package == "ray" and os.environ.get(TEST_RAY_VERSION):
        return os.environ[TEST_RAY_VERSION]
    try:
        return metadata.version(DISTRIBUTIONS.get(package, package))
    except metadata.PackageNotFoundError:
        return ""


def _switched_off(name: str) -> bool:
    told = {p.strip() for p in os.environ.get(OFF, "").split(",") if p.strip()}
    return bool(told & {"all", name})


def why_not(lever: Lever) -> str | None:
    """Why ``lever`` is not used in this process (decided afresh), or None when it is."""
    if _switched_off(lever.name):
        return f"{OFF}={os.environ[OFF]}"
    version = installed(lever.package)
    if not version.startswith(lever.checked):
        return (f"{lever.package} {version or '(not installed)'} is not a version it was checked against "
                f"({', '.join(c.rstrip('.') for c in lever.checked)})")
    try:
        return lever.probe()
    except Exception as exc:  # a probe that breaks is a surface that moved
        return f"its {lever.package} surfaces moved ({type(exc).__name__}: {exc})"


_decided: dict[tuple[str, str, str], str | None] = {}


def _key(lever: Lever) -> tuple[str, str, str]:
    # the test switches are part of the key: a test that sets one gets a decision of its own
    return lever.name, os.environ.get(TEST_RAY_VERSION, ""), os.environ.get(OFF, "")


def applies(lever: Lever) -> bool:
    """Whether this process uses ``lever``: decided once; one log line the first time it does not."""
    key = _key(lever)
    if key not in _decided:
        _decided[key] = why = why_not(lever)
        if why is not None:
            say = log.debug if _switched_off(lever.name) else log.info
            say("lever %s off (%s): %s", lever.name, why, lever.fallback)
    return _decided[key] is None


def reason(lever: Lever) -> str | None:
    """Why ``lever`` is off in this process (after :func:`applies`), or None."""
    applies(lever)
    return _decided[_key(lever)]


def forget() -> None:
    """Decide every lever again (tests that change the environment)."""
    _decided.clear()


def all_levers() -> list[Lever]:
    """Every lever of this folder, by name (for doctor, the docs and the tests)."""
    import sweeps.execution.levers as pkg

    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name == "core" or info.name.startswith("_"):  # _impl modules import private names at once
            continue
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, Lever)]
    return sorted(found, key=lambda lv: lv.name)


# Probe helpers: each returns what is missing, or None.


def has(owner: Any, *names: str) -> str | None:
    """``owner`` has every attribute of ``names``."""
    missing = [n for n in names if not hasattr(owner, n)]
    label = getattr(owner, "__name__", type(owner).__name__)
    return f"{label} lacks {', '.join(missing)}" if missing else None


def takes(fn: Any, *params: str) -> str | None:
    """``fn`` accepts every parameter of ``params`` by keyword (or has ``**kwargs``)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{fn!r} has no signature to check"
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    missing = [p for p in params if p not in sig.parameters]
    return f"{getattr(fn, '__qualname__', fn)} takes no {', '.join(missing)}" if missing else None


def binds(fn: Any, *args: Any, **kwargs: Any) -> str | None:
    """``fn(*args, **kwargs)`` matches ``fn``'s signature: the call a lever makes, checked as made (for a
    method taken from its class, pass the instance, or any stand-in, first)."""
    label = getattr(fn, "__qualname__", repr(fn))
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{label} has no signature to check"
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        return f"{label}{sig} cannot be called as the lever calls it ({exc})"
    return None


def fields(cls: Any, *names: str) -> str | None:
    """The dataclass ``cls`` has every field of ``names``."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return f"{getattr(cls, '__name__', cls)} is no dataclass"
    missing = sorted(set(names) - {f.name for f in dataclasses.fields(cls)})
    return f"{getattr(cls, '__name__', cls)} has no field {', '.join(missing)}" if missing else None


def documents(fn: Any, *params: str) -> str | None:
    """For a compiled callable without a signature (pybind11): the signature its docstring states names every
    parameter of ``params``."""
    head = (getattr(fn, "__doc__", None) or "").split("\n\n", 1)[0]
    missing = [p for p in params if not re.search(rf"\b{re.escape(p)}\s*:", head)]
    return f"{getattr(fn, '__qualname__', fn)} states no parameter {', '.join(missing)}" if missing else None


def source_says(module: str, *texts: str) -> str | None:
    """The dependency's own source of ``module`` still contains every one of ``texts`` (for a compiled class
    that carries no signature: the package's own call, made the way the lever makes it; read, not imported)."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec else None
    if not origin or not origin.endswith(".py"):
        return f"{module} has no source to read"
    with open(origin, encoding="utf-8") as f:
        text = f.read()
    missing = [t for t in texts if t not in text]
    return f"{module} no longer says {', '.join(missing)}" if missing else None


def first(*problems: str | None) -> str | None:
    """The first problem found by several probe helpers."""
    return next((p for p in problems if p), None)


def importable(modules: Iterable[str]) -> str | None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} moved: {exc}"
    return None
