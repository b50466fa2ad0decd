"""The wheel's metadata declares what the code imports, each with a range a major release cannot silently cross.

Read from the source with ``ast`` (every ``import`` in ``sweeps/``, ``hydra_plugins/`` and ``trainables/``) and from
``pyproject.toml``: a package imported directly must be a declared dependency (or an extra's), not one that only
arrives with Ray or MLflow today; every dependency has an upper bound.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
OWN = {"sweeps", "trainables", "hydra_plugins", "__future__"}
SOURCES = ("sweeps", "hydra_plugins", "trainables")
HOST_PROVIDED = {"IPython"}  # imported only inside a Jupyter kernel (sweeps/api/live.py), which brings it


def _declared() -> tuple[list[Requirement], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = [Requirement(r) for r in project["dependencies"]]
    extras = {Requirement(r).name.lower() for name, reqs in project["optional-dependencies"].items()
              if name != "test" for r in reqs}
    return required, extras


def _imported() -> dict[str, str]:
    """Top-level third-party module -> a file that imports it."""
    found: dict[str, str] = {}
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
                for name in names:
                    top = name.split(".")[0]
                    if top not in OWN | HOST_PROVIDED and top not in sys.stdlib_module_names:
                        found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_every_package_the_code_imports_is_declared() -> None:
    required, extras = _declared()
    names = {r.name.lower() for r in required} | extras
    distributions = metadata.packages_distributions()
    missing = []
    for module, where in sorted(_imported().items()):
        dists = {d.lower() for d in distributions.get(module, [module])}
        if not dists & names:
            missing.append(f"{module} (imported in {where}; distribution {', '.join(sorted(dists))})")
    assert not missing, f"declare these in pyproject.toml's dependencies: {missing}"


def test_every_dependency_has_an_upper_bound() -> None:
    required, _ = _declared()
    unbounded = [str(r) for r in required if not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier)]
    assert not unbounded, f"give these an upper bound (the next major release): {unbounded}"


def test_this_environment_satisfies_the_ranges() -> None:
    required, _ = _declared()
    outside = [f"{r.name} {metadata.version(r.name)} not in {r.specifier}" for r in required
               if not r.specifier.contains(metadata.version(r.name), prereleases=True)]
    assert not outside, outside
