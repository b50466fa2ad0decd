"""Hydra composition: argv overrides -> a plain, resolved dict. The only module that imports Hydra.

Config files come from the project's config folder, then the bundled one (:func:`sweeps.paths.conf_dirs`)
only: an override may not set ``hydra.*`` (``hydra.searchpath`` would add another folder) nor ``security.*``
(the allowlist comes from trusted places, see :mod:`sweeps.config.trust`). The primary config is sweeps' own
(the bundled ``config.yaml``) unless the project's ``config.yaml`` is a sweeps primary config
(:func:`sweeps.paths.primary_conf`): an existing Hydra app's ``conf/config.yaml`` is never read as one.

Hydra errors are turned into :class:`~sweeps.errors.BadInput` messages that name the key, list the valid
options, and suggest the closest key for a typo.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sweeps import paths
from sweeps.errors import BadInput

PRIMARY = "config"
BUNDLED_PRIMARY = "sweeps_bundled_primary"  # the bundled config.yaml, in Hydra's ConfigStore
PROJECT_ENV = "SWEEPS_HYDRA_PROJECT"  # read by hydra_plugins.sweeps_sweeper.project while Hydra composes


def groups() -> dict[str, list[str]]:
    """Config groups and their options, over every config folder (no Hydra import)."""
    out: dict[str, set[str]] = {}
    for conf in paths.conf_dirs():
        folders = [d for d in sorted(conf.iterdir()) if d.is_dir()] if conf.is_dir() else []
        spaces = conf.parent / paths.SPACES_DIR
        if spaces.is_dir() and conf != paths.bundled_conf():
            folders.append(spaces)
        for d in folders:
            name = "search_space" if d == spaces else d.name
            out.setdefault(name, set()).update(f.stem for f in d.glob("*.yaml"))
    return {k: sorted(v) for k, v in sorted(out.items())}


def origins(choices: Mapping[str, Any]) -> dict[str, str]:
    """The file each chosen group option comes from (the first config folder that has it), for ``--dry-run``
    and ``--cfg``."""
    out = {}
    for group, option in choices.items():
        if not isinstance(option, str) or group.startswith("hydra"):
            continue
        for conf in paths.conf_dirs():
            candidates = [conf / group / f"{option}.yaml"]
            if group == "search_space" and conf != paths.bundled_conf():
                candidates.append(conf.parent / paths.SPACES_DIR / f"{option}.yaml")
            found = next((c for c in candidates if c.is_file()), None)
            if found:
                out[group] = str(found)
                break
    return out


def _flatten(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, Mapping):
        return [prefix] if prefix else []
    keys = [prefix] if prefix else []
    for k, v in node.items():
        keys += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    return keys


@contextmanager
def _project_layer() -> Iterator[None]:
    """While Hydra composes: the project's config folder before the bundled one, read through sweeps' own
    config source (``hydra_plugins.sweeps_sweeper.project``: every file it opens is checked first by
    :func:`sweeps.config.limits.check_file`)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.sweeps_sweeper.project import ProjectConfigSource, ProjectSearchPath

    for plugin in (ProjectConfigSource, ProjectSearchPath):  # Hydra's public registration (scans can miss them)
        Plugins.instance().register(plugin)
    wrong = paths.conf_env_error()
    if wrong:
        raise BadInput(wrong)
    project = paths.project_conf()
    saved = os.environ.get(PROJECT_ENV)
    if project is None:
        os.environ.pop(PROJECT_ENV, None)
    else:
        os.environ[PROJECT_ENV] = str(project)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PROJECT_ENV, None)
        else:
            os.environ[PROJECT_ENV] = saved


def _primary_name() -> str:
    """The primary config's name for Hydra: ``config`` when the project's own ``config.yaml`` is a sweeps
    primary config, else the bundled one, stored in Hydra's ConfigStore under a name no project folder has (a
    project's ``conf/config.yaml`` is searched first, and in Hydra's default layout it is the app's own)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    if paths.primary_conf() != paths.bundled_conf():
        return PRIMARY
    node = OmegaConf.load(paths.bundled_conf() / paths.PRIMARY_FILE)
    ConfigStore.instance().store(name=BUNDLED_PRIMARY, node=node, provider="sweeps")
    return BUNDLED_PRIMARY


def _compose_raw(overrides: Sequence[str], with_hydra: bool = False) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with _project_layer(), initialize_config_dir(config_dir=str(paths.bundled_conf()), version_base="1.3",
                                                 job_name="sweeps"):
        return compose(config_name=_primary_name(), overrides=list(overrides), return_hydra_config=with_hydra)


def sources(overrides: Sequence[str]) -> list[str]:
    """Which config folders were searched, and the file each chosen group option came from (one line each)."""
    from omegaconf import OmegaConf

    cfg = compose_config(overrides, with_hydra=True)  # every check and error of a run first
    raw = OmegaConf.to_container(cfg.hydra.runtime.choices, resolve=False)
    choices: dict[str, Any] = {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else {}
    project = paths.project_conf()
    if project is not None and not project.is_dir():  # a project with search spaces only
        project = project.parent / paths.SPACES_DIR
    lines = [f"config folders: {'project ' + str(project) + ', then ' if project else ''}"
             f"bundled {paths.bundled_conf()}",
             f"primary: {PRIMARY} <- {paths.primary_conf() / paths.PRIMARY_FILE}"]
    found = origins(choices)
    lines += [f"{group}: {choices[group]} <- {path}" for group, path in sorted(found.items())]
    return lines


def _override_key(override: str) -> str:
    return re.split(r"[=~]", override.lstrip("+~"), maxsplit=1)[0].strip()


def _explain(exc: Exception, overrides: Sequence[str]) -> BadInput:
    """Translate a Hydra exception into a message naming the key and the valid choices."""
    text = str(exc).strip()
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = groups().get(group, [])
        return BadInput(f"{group}: unknown option {option!r}; available {group} options: "
                        f"{', '.join(options) or '(none)'}")
    key_error = re.search(r"Could not (?:override|append to|delete from) '([^']+)'", text) or re.search(
        r"Key '([^']+)' is not in struct", text)
    if key_error:
        bad = key_error.group(1)
        rest = [o for o in overrides if _override_key(o) != bad]
        hint = ""
        try:
            from omegaconf import OmegaConf

            keys = _flatten(OmegaConf.to_container(_compose_raw(rest), resolve=False))
            close = difflib.get_close_matches(bad, keys, n=3, cutoff=0.6)
            if close:
                hint = f"; did you mean {' or '.join(close)}?"
        except Exception:  # the suggestion is best-effort; the error itself stands
            pass
        return BadInput(f"{bad}: no such config key{hint} (use +{bad}=... only to add a new key)")
    if "mismatched input" in text or "no viable alternative" in text or "extraneous input" in text \
            or "Error parsing override" in text:
        return BadInput(f"malformed override: {text.splitlines()[0]}; overrides look like key=value, "
                        f"group=option or +experiment=NAME")
    return BadInput(f"config composition failed: {text.splitlines()[0] if text else type(exc).__name__}")


def compose_config(overrides: Sequence[str], with_hydra: bool = False) -> Any:
    """Compose ``conf/`` with Hydra overrides; returns the (unresolved) DictConfig (``with_hydra``: with its
    ``hydra`` node, which says where each group option came from)."""
    from sweeps.config import limits, trust

    too_big = limits.override_errors(overrides) + trust.override_errors(overrides, str(paths.conf_dir()))
    if too_big:
        raise BadInput(*too_big)
    bad = [o for o in overrides if "=" not in o and not o.startswith("~")]
    if bad:
        raise BadInput(*(f"malformed override {o!r}: expected key=value, group=option or +experiment=NAME"
                         for o in bad))
    overrides = list(overrides)
    for _ in range(len(overrides) + 1):
        try:
            return _compose_raw(overrides, with_hydra)
        except Exception as exc:  # Hydra raises several unrelated exception types
            if exc.__class__.__module__.split(".")[0] not in ("hydra", "omegaconf"):
                raise
            replaced = _replace_mapping(exc, overrides)
            if replaced is None:
                raise _explain(exc, overrides) from None
            overrides = replaced
    raise BadInput("config composition failed: could not apply the overrides")


def _replace_mapping(exc: Exception, overrides: list[str]) -> list[str] | None:
    """``key={...}`` on an existing mapping replaces it whole (Hydra would merge, and refuse new fields).

    So ``search_space.lr={dist: choice, values: [0.01, 0.1]}`` swaps a parameter's distribution.
    """
    m = re.search(r"Could not override '([^']+)'", str(exc))
    if not m:
        return None
    key = m.group(1)
    for i, o in enumerate(overrides):
        if not o.startswith(("+", "~")) and _override_key(o) == key and o.split("=", 1)[1].lstrip().startswith("{"):
            return [*overrides[:i], f"~{key}", f"+{o}", *overrides[i + 1:]]
    return None


def to_plain(cfg: Any) -> dict[str, Any]:
    """Resolve interpolations and convert to plain Python containers (what crosses into Ray)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from sweeps.config import limits, redaction, trust

    unresolved = OmegaConf.to_container(cfg, resolve=False)
    too_big = limits.interpolation_errors(unresolved)
    if not too_big and isinstance(unresolved, dict):
        too_big = trust.interpolation_errors(unresolved)
    if too_big:
        raise BadInput(*too_big)
    redaction.remember(redaction.env_secrets(unresolved))
    try:
        out = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "config"
        raise BadInput(f"{key}: cannot resolve interpolation: {str(exc).splitlines()[0]}") from None
    if not isinstance(out, dict):
        raise BadInput(f"config: expected a mapping at the top level, got {type(out).__name__}")
    return {str(k): v for k, v in out.items()}


def to_yaml(cfg: Any, resolve: bool = False) -> str:
    """A composed config (a DictConfig or plain containers) as YAML, the way Hydra prints it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(cfg, resolve=resolve)


def shown_yaml(overrides: Sequence[str], resolve: bool = False) -> str:
    """``--cfg``: the composed config as YAML, bounded like a run and with secret values redacted."""
    from omegaconf import OmegaConf

    from sweeps.config import redaction

    cfg = compose_config(overrides)
    data = to_plain(cfg) if resolve else OmegaConf.to_container(cfg, resolve=False)
    head = "".join(f"# {line}\n" for line in sources(overrides))
    return head + OmegaConf.to_yaml(OmegaConf.create(redaction.redact(data)))


def compose(overrides: Sequence[str]) -> dict[str, Any]:
    """Compose and resolve: the plain dict that :func:`sweeps.config.build_spec` validates."""
    return to_plain(compose_config(overrides))
