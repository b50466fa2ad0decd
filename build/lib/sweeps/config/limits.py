"""Bounds on what composition may load and produce, checked before Hydra or OmegaConf expand anything.

- Each config file Hydra opens (``conf/``, search spaces included), checked as it opens it: at most
  :data:`MAX_FILE_BYTES`, and YAML anchors/aliases may not expand past :data:`MAX_EXPANDED` nodes (a
  "billion laughs" file is refused in milliseconds, from the YAML event stream, before OmegaConf would copy
  every alias).
- Interpolations (``a: [${b}, ${b}]``) are sized the same way, on the unresolved config, before resolving.
- Overrides and the composed config: strings of at most :data:`MAX_STRING` characters, no control
  characters (tab and newline aside; none at all in keys), at most :data:`MAX_NODES` values, nesting of at
  most :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from sweeps.errors import BadInput

MAX_FILE_BYTES = 1_000_000
MAX_EXPANDED = 100_000
MAX_STRING = 10_000
MAX_NODES = 20_000
MAX_DEPTH = 32
MAX_RESOLVED = 5_000_000  # values + characters once interpolations are resolved
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
KEY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
OVERRIDE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # Hydra's grammar takes no newline either
NODE_REF = re.compile(r"\$\{\s*(\.*[A-Za-z_][\w.\[\]]*)\s*\}")


def yaml_expansion(text: str, limit: int = MAX_EXPANDED) -> int:
    """The number of nodes a YAML document holds once every alias is expanded (stops counting past ``limit``)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    anchors: dict[str, int] = {}
    stack: list[list[Any]] = []
    total = 0
    for ev in yaml.parse(text, Loader=loader):
        n = 0
        if isinstance(ev, yaml.AliasEvent):
            n = anchors.get(ev.anchor or "", 1)
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1
            if ev.anchor:
                anchors[ev.anchor] = 1
        elif isinstance(ev, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            stack.append([ev.anchor, 1])
        elif isinstance(ev, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            anchor, n = stack.pop()
            if anchor:
                anchors[anchor] = n
        if n:
            if stack:
                stack[-1][1] += n
            else:
                total += n
            if total > limit or (stack and stack[-1][1] > limit):
                return limit + 1
    return total


@lru_cache(maxsize=512)
def _file_error(path: str, size: int, mtime: float) -> str | None:
    if size > MAX_FILE_BYTES:
        return f"it is {size} bytes; a config file may hold at most {MAX_FILE_BYTES}"
    try:
        n = yaml_expansion(Path(path).read_text(errors="replace"))
    except Exception as exc:  # a YAML syntax error: Hydra reports it better when the file is used
        return None if "yaml" in type(exc).__module__ else f"unreadable ({exc})"
    if n > MAX_EXPANDED:
        return (f"its YAML anchors/aliases expand to more than {MAX_EXPANDED} nodes (a 'billion laughs' file); "
                f"write the values out or use fewer aliases")
    return None


def check_file(path: Path, group: str) -> None:
    """Refuse an oversized or alias-bomb YAML file, naming its config group (called as Hydra opens it: see
    :func:`sweeps.config.compose.guarded_loading`)."""
    try:
        st = path.stat()
    except OSError:
        return  # missing: Hydra names the option
    problem = _file_error(str(path), st.st_size, st.st_mtime)
    if problem:
        raise BadInput(f"{group or 'config'}: the config file {path.name if not group else group + '/' + path.name} "
                       f"is refused: {problem}")


def override_errors(overrides: Sequence[str]) -> list[str]:
    """Overlong overrides and control characters, before Hydra parses them."""
    errors = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0][:80] or "override"
        if len(o) > MAX_STRING:
            errors.append(f"{key}: the override is {len(o)} characters; at most {MAX_STRING}")
        elif OVERRIDE_CONTROL.search(o) or KEY_CONTROL.search(o.split("=", 1)[0]):
            errors.append(f"{key}: the override holds a control character ({_first(o)}); remove it")
    return errors


def _first(text: str) -> str:
    m = CONTROL.search(text) or OVERRIDE_CONTROL.search(text) or KEY_CONTROL.search(text)
    return f"U+{ord(m.group()):04X}" if m else "?"


def config_errors(cfg: Any) -> list[str]:
    """Values, keys, size and depth of the composed config within bounds; problems name the key."""
    errors: list[str] = []
    count = 0

    def walk(node: Any, key: str, depth: int) -> None:
        nonlocal count
        count += 1
        if depth > MAX_DEPTH:
            errors.append(f"{key}: nested more than {MAX_DEPTH} levels deep")
            return
        if isinstance(node, Mapping):
            for k, v in node.items():
                if isinstance(k, str) and (KEY_CONTROL.search(k) or len(k) > 250):
                    errors.append(f"{key}: a key holds a control character or is over 250 characters: {k[:40]!r}")
                    continue
                walk(v, f"{key}.{k}" if key else str(k), depth + 1)
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]", depth + 1)
        elif isinstance(node, str):
            if len(node) > MAX_STRING:
                errors.append(f"{key}: the value is {len(node)} characters; at most {MAX_STRING}")
            elif CONTROL.search(node):
                errors.append(f"{key}: the value holds a control character ({_first(node)}); remove it")

    walk(cfg, "", 0)
    if count > MAX_NODES:
        errors.append(f"config: {count} values; a sweep config may hold at most {MAX_NODES}")
    return errors


def _lookup(root: Any, parts: list[str]) -> Any:
    node = root
    for p in parts:
        if isinstance(node, Mapping) and p in node:
            node = node[p]
        elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node = node[int(p)]
        else:
            return None
    return node


def _target(ref: str, path: list[str]) -> list[str]:
    dots = len(ref) - len(ref.lstrip("."))
    rest = [p for p in re.split(r"[.\[\]]+", ref.lstrip(".")) if p]
    return (path[:len(path) - dots] if dots else []) + rest


def interpolation_size(root: Any, limit: int = MAX_RESOLVED, memo: dict[tuple[str, ...], int] | None = None,
                       at: tuple[str, ...] = ()) -> int:
    """Values plus characters the config (or its node at path ``at``) would hold once ``${node.path}``
    interpolations are resolved; counted with a memo per path, never by expanding."""
    memo = {} if memo is None else memo

    def size(node: Any, path: list[str], active: frozenset[tuple[str, ...]]) -> int:
        if isinstance(node, Mapping):
            return 1 + sum(size(v, [*path, str(k)], active) for k, v in node.items())
        if isinstance(node, list | tuple):
            return 1 + sum(size(v, [*path, str(i)], active) for i, v in enumerate(node))
        if not isinstance(node, str) or "${" not in node:
            return 1 + (len(node) if isinstance(node, str) else 0)
        total = len(node)
        for ref in NODE_REF.findall(node):
            t = tuple(_target(ref, path))
            if t in active:
                continue  # a cycle: OmegaConf reports it
            if t not in memo:
                memo[t] = min(size(_lookup(root, list(t)), list(t), active | {t}), limit + 1)
            total = min(total + memo[t], limit + 1)
        return total

    return size(_lookup(root, list(at)), list(at), frozenset())


def interpolation_errors(root: Any, limit: int = MAX_RESOLVED) -> list[str]:
    """A refusal naming the smallest node whose interpolations expand past ``limit``, if any."""
    memo: dict[tuple[str, ...], int] = {}
    if interpolation_size(root, limit, memo) <= limit:
        return []
    at: tuple[str, ...] = ()
    while True:
        node = _lookup(root, list(at))
        keys = list(node) if isinstance(node, Mapping) else range(len(node)) if isinstance(node, list) else []
        over = [(interpolation_size(root, limit, memo, (*at, str(k))), str(k)) for k in keys]
        big = max(over, default=(0, ""))
        if big[0] <= limit:
            break
        at = (*at, big[1])
    return [f"{'.'.join(at) or 'config'}: its interpolations (${{...}}) would expand to more than {limit} values "
            f"and characters; refusing to resolve the config"]
