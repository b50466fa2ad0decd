"""Where things live: the config folders (the project's, then the bundled ones), the state folder ($SWEEPS_HOME)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # a checkout's root (site-packages when installed)
BUNDLED = Path(__file__).resolve().parent / "_bundled"  # an installed package's copy of conf/ (setup.py builds it)
CONF_GROUPS = ("trainable", "search_space", "searcher", "scheduler", "tracking", "cluster", "experiment")
SPACES_DIR = "search_spaces"  # a project's search spaces, beside its conf/ (the search_space group)


def bundled_conf() -> Path:
    """The configs that ship with sweeps: the installed package's copy, else a checkout's own ``conf/``."""
    installed = BUNDLED / "conf"
    return installed if (installed / "config.yaml").is_file() else PACKAGE_ROOT / "conf"


def looks_like_conf(folder: Path) -> bool:
    """A folder of sweeps configs: a primary ``config.yaml`` or one of sweeps' config groups (a Hydra app's
    own ``conf/`` has neither)."""
    return (folder / "config.yaml").is_file() or any((folder / g).is_dir() for g in CONF_GROUPS)


def project_conf() -> Path | None:
    """The project's own config folder, searched before the bundled one: ``$SWEEPS_CONF_DIR``, else ``./conf``
    when it holds sweeps configs (or ``./search_spaces`` exists); None when there is none, or it is the bundled
    folder itself (this repo)."""
    env = os.environ.get("SWEEPS_CONF_DIR")
    if env:
        folder = Path(env).resolve()
    else:
        folder = (Path.cwd() / "conf").resolve()
        if not (looks_like_conf(folder) or (Path.cwd() / SPACES_DIR).is_dir()):
            return None
    return None if folder == bundled_conf().resolve() else folder


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
