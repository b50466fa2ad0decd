"""Where things live: the config folders (the project's, then the bundled ones), the state folder ($SWEEPS_HOME)."""

from __future__ import annotations

import os
import re
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # a checkout's root (site-packages when installed)
BUNDLED = Path(__file__).resolve().parent / "_bundled"  # an installed package's copy of conf/ (setup.py builds it)
CONF_GROUPS = ("trainable", "search_space", "searcher", "scheduler", "tracking", "cluster", "experiment")
SPACES_DIR = "search_spaces"  # a project's search spaces, beside its conf/ (the search_space group)
PRIMARY_FILE = "config.yaml"
CONF_ENV = "SWEEPS_CONF_DIR"


def bundled_conf() -> Path:
    """The configs that ship with sweeps: the installed package's copy, else a checkout's own ``conf/``."""
    installed = BUNDLED / "conf"
    return installed if (installed / PRIMARY_FILE).is_file() else PACKAGE_ROOT / "conf"


def sweeps_primary(file: Path) -> bool:
    """A sweeps primary config: a ``config.yaml`` with a top-level ``sweep:`` section, as the bundled one has.

    Hydra's own default layout puts an app's primary config at ``conf/config.yaml``; such a file (no ``sweep:``)
    is the app's, never read as sweeps' primary config."""
    try:
        with file.open(encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 20)  # a primary config is a few KB; limits.check_file refuses huge files later
    except OSError:
        return False
    return re.search(r"^sweep:", head, re.MULTILINE) is not None


def looks_like_conf(folder: Path) -> bool:
    """A folder of sweeps configs: a sweeps primary ``config.yaml`` or one of sweeps' config groups (a Hydra
    app's own ``conf/`` has neither: its ``config.yaml`` is its own)."""
    return sweeps_primary(folder / PRIMARY_FILE) or any((folder / g).is_dir() for g in CONF_GROUPS)


def project_conf() -> Path | None:
    """The project's own config folder, searched before the bundled one: ``$SWEEPS_CONF_DIR``, else ``./conf``
    when it holds sweeps configs or ``./search_spaces`` exists (then ``./conf`` may not exist: the project has
    search spaces only); None when there is none, or it is the bundled folder itself (this repo)."""
    env = os.environ.get(CONF_ENV)
    if env:
        folder = Path(env).resolve()
    else:
        folder = (Path.cwd() / "conf").resolve()
        if not (looks_like_conf(folder) or (Path.cwd() / SPACES_DIR).is_dir()):
            return None
    return None if folder == bundled_conf().resolve() else folder


def conf_env_error() -> str | None:
    """Why ``$SWEEPS_CONF_DIR`` cannot be used (it names no folder), else None."""
    env = os.environ.get(CONF_ENV)
    if env and not Path(env).resolve().is_dir():
        return (f"{CONF_ENV}: {Path(env).resolve()} is not a folder; point it at your project's conf/ folder, or "
                f"unset it (then ./conf and the bundled configs are used)")
    return None


def primary_conf() -> Path:
    """The folder whose ``config.yaml`` is the primary config: the project's when it holds a sweeps primary
    config (:func:`sweeps_primary`), else the bundled one. A project's other ``config.yaml`` is never read."""
    project = project_conf()
    if project is not None and sweeps_primary(project / PRIMARY_FILE):
        return project
    return bundled_conf()


def conf_dirs() -> list[Path]:
    """Every config folder, in the order Hydra searches them (the first that has a file wins)."""
    project = project_conf()
    return [*([project] if project else []), bundled_conf()]


def conf_dir() -> Path:
    """The first config folder searched: the project's, else the bundled one."""
    return conf_dirs()[0]


def home() -> Path:
    """The project's state folder: MLflow store, Ray results, sweep index. $SWEEPS_HOME or ./.sweeps."""
    return Path(os.environ.get("SWEEPS_HOME", ".sweeps")).resolve()


def default_tracking_uri() -> str:
    """The embedded MLflow store: a SQLite file under :func:`home`."""
    return f"sqlite:///{home() / 'mlflow.db'}"


def default_storage() -> str:
    """Where Ray results and checkpoints go unless ``storage.path`` says otherwise (a local folder)."""
    return str(home() / "ray")


def index_dir() -> Path:
    return home() / "sweeps"


def outside_home(path: Path) -> str | None:
    """Why ``path`` may not be read as state (a symlink, or a real path outside :func:`home`), else None.

    Index records and schedule entries are read by name; a link planted there must not lead out.
    """
    real = path.resolve()
    if path.is_symlink() or not real.is_relative_to(home()):
        return (f"{path} is a link to {real}; refusing to follow it (state is read only from real files "
                f"inside SWEEPS_HOME, {home()}); replace it with the real file")
    return None
