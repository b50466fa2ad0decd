"""The wheel's build step that pyproject.toml cannot say: the bundled configs copied into the package.

``conf/`` (with its ``search_space`` group, a link to ``search_spaces/``) stays where this repo keeps it; a
built wheel carries one copy of it as ``sweeps/_bundled/conf``, which ``sweeps.paths.bundled_conf`` finds in an
installed package. Nothing is duplicated in the repo.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithConfigs(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "sweeps" / "_bundled" / "conf"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ROOT / "conf", target, symlinks=False,  # the search_space link becomes a folder
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithConfigs})
