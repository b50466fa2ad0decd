"""A user's own project folder (issue 39), in process: which configs it supplies, where scaffolds go, what is refused.

- An existing Hydra app (Hydra's default layout: ``conf/config.yaml`` + group folders) keeps working: its
  ``config.yaml`` is never read as sweeps' primary config; a project's ``config.yaml`` that *is* one (it has
  ``sweep:``) still replaces the bundled one.
- ``search_spaces/`` without ``conf/`` is a project (its spaces usable with the bundled experiments);
  ``SWEEPS_CONF_DIR`` naming no folder is refused by name.
- ``paths.project_conf`` order, ``project.target`` (site-packages refused, ``--dir``), ``project.init``, the
  origins ``--cfg job`` prints, ``-v`` after the command, and a project's own ``trainables`` package refused.

Fast tier: composition only, nothing starts.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeps import paths
from sweeps.cli import main as cli_main
from sweeps.errors import BadInput
from sweeps.ops import project

HYDRA_APP = {  # Hydra's own tutorial layout (hydra.cc, "Grouping config files")
    "conf/config.yaml": "defaults:\n  - db: mysql\n  - _self_\n\nlr: 0.1\nepochs: 3\n",
    "conf/db/mysql.yaml": "driver: mysql\nuser: omry\npassword: secret\n",
    "conf/db/postgresql.yaml": "driver: postgresql\nuser: postgres_user\npassword: drowssap\n",
    "my_app.py": "import hydra\n\n\n@hydra.main(version_base='1.3', config_path='conf', config_name='config')\n"
                 "def my_app(cfg):\n    print(cfg)\n\n\nif __name__ == '__main__':\n    my_app()\n",
}
SPACE = "lr: {dist: loguniform, low: 1.0e-3, high: 1.0e-1}\nhidden_size: {dist: choice, values: [16, 32]}\n"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty project folder as the current one: no SWEEPS_CONF_DIR, sys.path and PYTHONPATH restored."""
    monkeypatch.delenv("SWEEPS_CONF_DIR", raising=False)
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = tmp_path / "proj"
    root.mkdir()
    monkeypatch.chdir(root)
    yield root
    logging.getLogger("sweeps").setLevel(logging.INFO)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_existing_hydra_apps_conf_is_never_read_as_the_primary_config(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hydra import compose, initialize_config_dir

    _write(folder, HYDRA_APP)
    with initialize_config_dir(config_dir=str(folder / "conf"), version_base="1.3"):
        assert compose("config").db.driver == "mysql", "a real Hydra app's config"
    assert paths.project_conf() is None, "config.yaml and db/ alone: not a sweeps project"
    code, out, err = _run(["run", "+experiment=quickstart", "--dry-run"], capsys)
    assert code == 0, err
    assert f"primary: config <- {paths.bundled_conf() / 'config.yaml'}" in out

    # `sweeps init` over the Hydra app: now a project (conf/experiment/), its config.yaml still not the primary
    assert cli_main.main(["init"]) == 0
    assert paths.project_conf() == folder / "conf"
    assert paths.primary_conf() == paths.bundled_conf()
    for experiment in ("quickstart", "starter"):
        code, out, err = _run(["run", f"+experiment={experiment}", "--dry-run"], capsys)
        assert code == 0, err
        assert f"primary: config <- {paths.bundled_conf() / 'config.yaml'}" in out
    assert "starter <- " + str(folder / "conf" / "experiment" / "starter.yaml") in out
    assert "search_space: starter <- " + str(folder / "search_spaces" / "starter.yaml") in out
    from sweeps.ops import doctor

    check = doctor.check_configs()
    assert check.ok and "0 of" not in check.detail and "; not:" not in check.detail, check.detail
    assert (folder / "conf" / "config.yaml").read_text() == HYDRA_APP["conf/config.yaml"], "the app's file kept"


def test_a_projects_own_sweeps_primary_config_replaces_the_bundled_one(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundled = (paths.bundled_conf() / "config.yaml").read_text()
    assert "  num_samples: 4 " in bundled
    _write(folder, {"conf/config.yaml": bundled.replace("  num_samples: 4 ", "  num_samples: 9 ")})
    assert paths.project_conf() == folder / "conf" and paths.primary_conf() == folder / "conf"
    code, out, err = _run(["run", "--cfg", "job"], capsys)
    assert code == 0, err
    assert f"# primary: config <- {folder / 'conf' / 'config.yaml'}" in out
    assert "  num_samples: 9\n" in out


def test_search_spaces_without_conf_is_a_project(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(folder, {"search_spaces/mine.yaml": SPACE})
    code, out, err = _run(["run", "+experiment=quickstart", "search_space=mine", "--dry-run"], capsys)
    assert code == 0, err
    assert f"search_space: mine <- {folder / 'search_spaces' / 'mine.yaml'}" in out
    assert f"config folders: project {folder / 'search_spaces'}, then bundled" in out
    code, _, err = _run(["run", "+experiment=quickstart", "search_space=nope", "--dry-run"], capsys)
    assert code == 2 and "available search_space options:" in err and "mine" in err and "SWEEPS_CONF_DIR" not in err


def test_a_conf_dir_that_is_no_folder_is_refused_by_name(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(folder / "nothing"))
    code, _, err = _run(["run", "+experiment=quickstart", "--dry-run"], capsys)
    assert code == 2 and f"SWEEPS_CONF_DIR: {folder / 'nothing'} is not a folder" in err, err


def test_project_conf_order(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert paths.project_conf() is None and paths.conf_dirs() == [paths.bundled_conf()]
    (folder / "conf" / "scheduler").mkdir(parents=True)
    assert paths.project_conf() == folder / "conf"
    assert paths.conf_dirs() == [folder / "conf", paths.bundled_conf()], "the project's first"
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(other))
    assert paths.project_conf() == other, "SWEEPS_CONF_DIR before ./conf"
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(paths.bundled_conf()))
    assert paths.project_conf() is None and paths.conf_dirs() == [paths.bundled_conf()], "the bundled one once"


def test_cfg_job_names_the_file_of_every_group(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundled_asha = (paths.bundled_conf() / "scheduler" / "asha.yaml").read_text()
    _write(folder, {"conf/scheduler/asha.yaml": bundled_asha.replace("grace_period: 2", "grace_period: 1")})
    code, out, err = _run(["run", "+experiment=quickstart", "--cfg", "job"], capsys)
    assert code == 0, err
    head = [line for line in out.splitlines() if line.startswith("# ")]
    bundled = paths.bundled_conf()
    assert head[0] == f"# config folders: project {folder / 'conf'}, then bundled {bundled}"
    assert f"# scheduler: asha <- {folder / 'conf' / 'scheduler' / 'asha.yaml'}" in head
    for group, option in (("searcher", "random"), ("experiment", "quickstart"), ("trainable", "digits")):
        assert f"# {group}: {option} <- {bundled / group / (option + '.yaml')}" in head
    assert "  grace_period: 1\n" in out


def test_target_refuses_site_packages_and_takes_dir(folder: Path, tmp_path: Path) -> None:
    site = project.installed_roots()[0]
    with pytest.raises(BadInput, match="where installed packages live") as refused:
        project.target(site / "somepkg")
    assert str(site / "somepkg") in str(refused.value) and "--dir" in str(refused.value)
    assert project.target(None) == folder
    assert project.target(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    code = cli_main.main(["new", "trainable", "x", "--dir", str(site)])
    assert code == 2 and not (site / "x.py").exists() and not (site / "conf").exists()


def test_init_writes_a_starter_project_once(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "other"
    written = project.init(elsewhere)
    assert sorted(p.relative_to(elsewhere).as_posix() for p in written) == [
        ".gitignore", "conf/experiment/starter.yaml", "search_spaces/starter.yaml"]
    assert (elsewhere / ".gitignore").read_text() == ".sweeps/\nreports/\n"
    (elsewhere / "search_spaces" / "starter.yaml").write_text(SPACE)  # the user's edit
    assert project.init(elsewhere) == [], "existing files kept"
    assert (elsewhere / "search_spaces" / "starter.yaml").read_text() == SPACE
    assert not (folder / "conf").exists(), "only --dir written"
    os.chdir(elsewhere)
    code, out, err = _run(["run", "+experiment=starter", "--dry-run"], capsys)
    assert code == 0, err
    assert "sweep          : starter" in out and 'hidden_size: {"dist": "choice", "values": [16, 32]}' in out, out


def test_verbose_after_the_command(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweeps_log = logging.getLogger("sweeps")
    code, out, err = _run(["run", "+experiment=quickstart", "--dry-run", "-v"], capsys)
    assert code == 0 and "unknown flag" not in err, err
    assert sweeps_log.level == logging.DEBUG
    assert cli_main.main(["run", "+experiment=quickstart", "--dry-run"]) == 0
    assert sweeps_log.level == logging.INFO
    assert cli_main.main(["init", "--verbose"]) == 0 and sweeps_log.level == logging.DEBUG
    assert cli_main.main(["-v", "init"]) == 0 and sweeps_log.level == logging.DEBUG
    assert cli_main.main(["init"]) == 0 and sweeps_log.level == logging.INFO


@pytest.mark.parametrize("own", ["trainables/__init__.py", "trainables.py"])
def test_a_projects_own_trainables_package_is_refused_by_name(
        own: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(folder, {own: "", "conf/experiment/.keep": ""})
    code, _, err = _run(["run", "+experiment=quickstart", "--dry-run"], capsys)
    assert code == 2 and f"{folder / own}: this project's own `trainables` would hide" in err, err
    assert "rename it" in err
    assert str(folder) not in sys.path, "refused before the project's folder went onto sys.path"
    code, _, err = _run(["new", "trainable", "mine"], capsys)
    assert code == 2 and "would hide" in err and not (folder / "mine.py").exists()


def test_a_trainables_folder_without_init_hides_nothing(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(folder, {"trainables/notes.txt": "", "search_spaces/mine.yaml": SPACE})
    code, _, err = _run(["run", "+experiment=quickstart", "search_space=mine", "--dry-run"], capsys)
    assert code == 0, err
    import trainables.common  # noqa: F401 - sweeps' own package, still importable

    assert sys.path[0] == str(folder)
