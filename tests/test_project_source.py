"""The project's config source reads, lists and heads configs as Hydra's own file source does, with its own code
(Hydra's private ConfigSource helpers are not called: tests/test_architecture.py's seam rule)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigSource

from hydra_plugins.sweeps_sweeper.project import ProjectConfigSource, header_of, yaml_name

REPO = Path(__file__).resolve().parent.parent
PROJECT = f"sweepsproject://{REPO / 'conf'}"  # as ProjectSearchPath puts it on Hydra's search path
HEADERS = ["# @package _global_\nx: 1\n", "\n\n  # @package   foo.bar\n# @other v\nx: 1",
           "# a comment\n# @package _global_\n", "x: 1\n", "", "#@package _group_\n"]


@pytest.mark.parametrize("text", HEADERS)
def test_headers_read_as_hydra_reads_them(text: str) -> None:
    assert header_of(text) == ConfigSource._get_header_dict(text)


@pytest.mark.parametrize("text", ["# @package\n", "# @package a b\n"])
def test_a_bad_header_is_refused_as_hydra_refuses_it(text: str) -> None:
    with pytest.raises(ValueError) as hydras:
        ConfigSource._get_header_dict(text)
    with pytest.raises(ValueError) as ours:
        header_of(text)
    assert str(ours.value) == str(hydras.value)


def test_config_names_get_hydras_suffix() -> None:
    assert yaml_name("scheduler/asha") == "scheduler/asha.yaml"
    assert yaml_name("scheduler/asha.yaml") == ConfigSource._normalize_file_name("scheduler/asha.yaml")


@pytest.mark.parametrize("group", ["", "scheduler", "experiment", "trainable", "searcher"])
@pytest.mark.parametrize("kind", [None, ObjectType.GROUP, ObjectType.CONFIG])
def test_groups_list_as_hydras_file_source_lists_them(group: str, kind: ObjectType | None) -> None:
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    ours = ProjectConfigSource(provider="t", path=PROJECT)
    hydras = FileConfigSource(provider="t", path=str(REPO / "conf"))
    assert ours.list(group, kind) == sorted(hydras.list(group, kind))


def test_a_config_loads_as_hydras_file_source_loads_it() -> None:
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    ours = ProjectConfigSource(provider="t", path=PROJECT).load_config("experiment/quickstart")
    hydras = FileConfigSource(provider="t", path=str(REPO / "conf")).load_config("experiment/quickstart")
    assert ours.header == hydras.header == {"package": "_global_"}
    assert ours.config == hydras.config
