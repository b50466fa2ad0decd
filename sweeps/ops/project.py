"""A user's project folder: where scaffolds are written, and how its own code is imported.

A project is the folder a user works in (the current one, or ``--dir``): its ``conf/`` and ``search_spaces/``
are searched before the bundled configs (:func:`sweeps.paths.conf_dirs`), and its trainables are plain modules
in it (``NAME.py``), imported from that folder by the driver and, through ``PYTHONPATH``, by the embedded Ray's
processes (a cluster's nodes get them shipped, as ``--from`` packages are). Nothing is ever written into an
installed package: a target inside ``site-packages`` (or not writable) is refused by name.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

from sweeps import paths
from sweeps.errors import BadInput


def installed_roots() -> list[Path]:
    """Where installed packages live (every site-packages of this interpreter)."""
    found = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")}
    found |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(p).resolve() for p in found if p]


def target(folder: str | os.PathLike[str] | None, key: str = "--dir") -> Path:
    """The project folder to write into (``folder`` or the current one): BadInput when it lies inside an
    installed package's folder or cannot be written."""
    root = Path(folder or os.getcwd()).resolve()
    for inside in installed_roots():
        if root == inside or inside in root.parents:
            raise BadInput(f"{key}: {root} is inside {inside}, where installed packages live (the next pip install "
                           f"would delete what is written there); run it from your project's folder, or give "
                           f"--dir PROJECT")
    probe = root if root.exists() else next((p for p in root.parents if p.exists()), Path("/"))
    if not os.access(probe, os.W_OK):
        raise BadInput(f"{key}: {root} is not writable; give --dir a folder you can write")
    return root


def shadowing(folder: Path) -> str | None:
    """Why ``folder`` cannot be put first on ``sys.path``: its own ``trainables`` package (or module) would hide
    the one sweeps ships (``trainables.common``, the bundled trainables, what scaffolds import), else None.

    A plain ``trainables/`` folder without ``__init__.py`` hides nothing (Python prefers a regular package to a
    namespace folder wherever it lies); this repo, and a clone of it (``sweeps/`` beside ``trainables/``), keep
    their own package: it is sweeps' own."""
    own = next((p for p in (folder / "trainables" / "__init__.py", folder / "trainables.py") if p.is_file()), None)
    if own is None or folder == paths.PACKAGE_ROOT or (folder / "sweeps" / "__init__.py").is_file():
        return None
    return (f"{own}: this project's own `trainables` would hide the `trainables` package sweeps ships "
            f"({paths.PACKAGE_ROOT / 'trainables'}: trainables.common and the bundled trainables), since the "
            f"project's folder comes first on sys.path; rename it (e.g. to my_trainables) and the _target_ paths "
            f"in conf/ that name it")


def refuse_shadowing(folder: Path) -> None:
    """BadInput when ``folder``'s own ``trainables`` would hide sweeps' (:func:`shadowing`)."""
    problem = shadowing(folder)
    if problem:
        raise BadInput(problem)


def root() -> Path:
    """The project's folder: the one holding its config folder, else the current one."""
    project = paths.project_conf()
    return project.parent if project is not None else Path.cwd().resolve()


def importable() -> Path:
    """Make the project's own modules importable here and in the processes this one starts (the embedded
    Ray's inherit ``PYTHONPATH``): the project's folder first on both. Idempotent. BadInput when the folder
    holds its own ``trainables`` package (:func:`shadowing`)."""
    folder = root()
    refuse_shadowing(folder)
    text = str(folder)
    if text not in sys.path:
        sys.path.insert(0, text)
    current = os.environ.get("PYTHONPATH", "")
    if text not in current.split(os.pathsep):
        os.environ["PYTHONPATH"] = text + (os.pathsep + current if current else "")
    return folder


STARTER_EXPERIMENT = """# @package _global_
# {name}: this project's first sweep, `python -m sweeps run +experiment={name}` (made by `python -m sweeps init`).
# It sweeps the bundled digits trainable over this project's search space (search_spaces/{name}.yaml) under
# ASHA. Your own trainable: `python -m sweeps new trainable NAME`. Any bundled searcher, scheduler or trainable
# can be used here, and a file of the same name under conf/ (conf/scheduler/asha.yaml, say) replaces it.
defaults:
  - override /trainable: digits
  - override /search_space: {name}
  - override /scheduler: asha

sweep:
  name: {name}
  num_samples: 4
  max_concurrent_trials: 2

trainable:
  num_workers: 1
  params:
    epochs: 4
"""
STARTER_SPACE = """# The search space of the {name} experiment (python -m sweeps run --help lists the distributions).
lr: {{dist: loguniform, low: 1.0e-3, high: 1.0e-1}}
hidden_size: {{dist: choice, values: [32, 64, 128]}}
"""
IGNORED = (".sweeps/", "reports/")


def init(folder: str | os.PathLike[str] | None = None, name: str = "starter") -> list[Path]:
    """``sweeps init``: a project's ``conf/`` and ``search_spaces/`` with a starter experiment (existing files
    are kept). Returns what was written."""
    root = target(folder)
    refuse_shadowing(root)
    files = {root / "conf" / "experiment" / f"{name}.yaml": STARTER_EXPERIMENT.format(name=name),
             root / "search_spaces" / f"{name}.yaml": STARTER_SPACE.format(name=name)}
    written = []
    for path, text in files.items():
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    ignore = root / ".gitignore"
    have = ignore.read_text().splitlines() if ignore.is_file() else []
    missing = [p for p in IGNORED if p not in have]
    if missing:
        with ignore.open("a") as f:
            f.write("".join(f"{p}\n" for p in missing))
        written.append(ignore)
    return written
