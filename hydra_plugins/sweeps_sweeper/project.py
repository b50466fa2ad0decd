"""A project's own configs on top of ``sweeps``' bundled ones, through Hydra's public plugin interfaces.

While ``sweeps`` composes a sweep (and only then: :data:`PROJECT_ENV` names the project's conf folder), the
search path gets the project's folder before the bundled configs (:class:`ProjectSearchPath`), read by
:class:`ProjectConfigSource`:

- ``<conf>/<group>/<option>.yaml`` as Hydra's own file source reads it, and for the ``search_space`` group also
  ``<conf>/../search_spaces/<option>.yaml`` (a project keeps its spaces beside ``conf/``, as this repo does);
- every file is checked before Hydra parses it (size, YAML alias bombs: ``sweeps.config.limits.check_file``),
  so a bad file is refused by name, and only when a sweep uses it.

Other Hydra apps in the same environment never see any of it (the variable is unset).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

PROJECT_ENV = "SWEEPS_HYDRA_PROJECT"  # the project's conf folder, set by sweeps.config.compose while it composes
SCHEME = "sweepsproject"
SPACES_GROUP, SPACES_DIR = "search_space", "search_spaces"
SUFFIX = ".yaml"  # the only config suffix Hydra reads under version_base 1.2 and later
NOT_CONFIGS = ("__pycache__", "__init__.py")
HEADER_LINE = re.compile(r"^\s*#\s*@")


def yaml_name(config_path: str) -> str:
    """``group/option`` -> ``group/option.yaml`` (a name that already ends in ``.yaml`` is kept)."""
    return config_path if config_path.endswith(SUFFIX) else config_path + SUFFIX


def header_of(text: str) -> dict[str, str | None]:
    """The ``# @key value`` lines that open a config file (``# @package _global_``), as Hydra reads them: empty
    lines skipped, the first other line ends the header; ``package`` is None when not given."""
    found: dict[str, str | None] = {}
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        if not HEADER_LINE.match(line):
            break
        text = line.lstrip("#").strip()
        words = text.split()
        if len(words) != 2:
            raise ValueError(f"Expected header format: KEY VALUE, got '{text}'" if len(words) < 2 else
                             f"Too many components in '{text}'")
        if words[0].startswith("@"):
            found[words[0][1:]] = words[1]
    found.setdefault("package", None)
    return found


class ProjectConfigSource(ConfigSource):
    """The project's conf folder (and its ``search_spaces/`` beside it), each file checked before it is read."""

    @staticmethod
    def scheme() -> str:
        return SCHEME

    def _roots(self, config_path: str) -> list[Path]:
        conf = Path(self.path)
        roots = [conf]
        head = config_path.strip("/").split("/", 1)[0]
        if head == SPACES_GROUP:  # search_space/x.yaml -> ../search_spaces/x.yaml
            roots.append(conf.parent / SPACES_DIR)
        return roots

    def _candidates(self, config_path: str) -> list[Path]:
        path = config_path.strip("/")
        out = []
        for i, root in enumerate(self._roots(path)):
            rel = path if i == 0 else path.split("/", 1)[1] if "/" in path else ""
            out.append(root / rel if rel else root)
        return out

    def load_config(self, config_path: str) -> ConfigResult:
        from sweeps.config import limits

        name = yaml_name(config_path)
        for candidate in self._candidates(name):
            real = Path(os.path.realpath(candidate))
            if real.is_file():
                limits.check_file(real, os.path.dirname(name))
                text = real.read_text(encoding="utf-8")
                return ConfigResult(config=OmegaConf.load(real), path=f"{SCHEME}://{self.path}",
                                    provider=self.provider, header=header_of(text[:512]))
        raise ConfigLoadError(f"Config not found : {config_path} in {self.path}")

    def available(self) -> bool:
        return Path(self.path).is_dir()

    def is_group(self, config_path: str) -> bool:
        return any(c.is_dir() for c in self._candidates(config_path))

    def is_config(self, config_path: str) -> bool:
        return any(c.is_file() for c in self._candidates(yaml_name(config_path)))

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        files: list[str] = []
        for folder in self._candidates(config_path):
            if not folder.is_dir():
                continue
            for entry in os.listdir(folder):
                if entry in NOT_CONFIGS:
                    continue
                child = os.path.join(config_path, entry)
                if results_filter in (None, ObjectType.GROUP) and self.is_group(child):
                    files.append(entry)
                if results_filter in (None, ObjectType.CONFIG) and self.is_config(child):
                    files.append(entry.rsplit(".", 1)[0] if "." in entry else entry)
        return sorted(set(files))


class ProjectSearchPath(SearchPathPlugin):
    """Puts the project's conf folder before the bundled configs while ``sweeps`` composes."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        conf = os.environ.get(PROJECT_ENV)
        if conf:
            search_path.prepend(provider="sweeps-project", path=f"{SCHEME}://{conf}",
                                anchor=SearchPathQuery(provider="main"))
