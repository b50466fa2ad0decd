"""Where things live: the config folder, the project's state folder ($SWEEPS_HOME)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def conf_dir() -> Path:
    """Hydra's config folder: $SWEEPS_CONF_DIR, else ./conf, else the one beside the package."""
    env = os.environ.get("SWEEPS_CONF_DIR")
    if env:
        return Path(env).resolve()
    local = Path.cwd() / "conf"
    if (local / "config.yaml").is_file():
        return local.resolve()
    return PACKAGE_ROOT / "conf"


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
