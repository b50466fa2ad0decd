"""Schedule entries on disk: ``$SWEEPS_HOME/schedules/<name>.json`` and each one's last-run state.

An entry holds the Hydra overrides of the sweep, the cron expression, the time zone and where it is installed
(crontab, a systemd user timer, or an outside scheduler). Cron and time zones: :mod:`sweeps.ops.cron`; the
installed text: :mod:`sweeps.ops.units`; installing it: :mod:`sweeps.ops.install`; the run itself:
:mod:`sweeps.ops.nightly`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweeps import paths
from sweeps.errors import BadInput

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


KINDS = ("cron", "systemd", "external")


@dataclass
class Entry:
    """One schedule, as stored in ``$SWEEPS_HOME/schedules/<name>.json``."""

    name: str
    overrides: list[str]
    cron: str
    tz: str | None
    kind: str  # cron | systemd | external (recorded only; e.g. a Kubernetes CronJob runs it)
    project: str  # the folder the run cds into (reports/, logs/, conf/)
    home: str  # $SWEEPS_HOME when it was added
    created: float = field(default_factory=time.time)
    env: dict[str, str] = field(default_factory=dict)
    guarded: bool = False  # cron fires hourly and `schedule run --fired-at` checks the time zone

    @property
    def log_path(self) -> Path:
        return Path(self.project) / "logs" / "schedules" / f"{self.name}.log"


def validate_name(name: str | None) -> str:
    if not name:
        raise BadInput("NAME: required, e.g. `python -m sweeps schedule remove nightly`")
    if not NAME_RE.match(name):
        raise BadInput(f"NAME: {name!r} is not a valid schedule name; use 1-64 letters, digits, _ or -")
    return name


def schedules_dir() -> Path:
    return paths.home() / "schedules"


def locks_dir() -> Path:
    return paths.home() / "locks"


def entry_path(name: str) -> Path:
    return schedules_dir() / f"{name}.json"


def state_path(name: str) -> Path:
    return schedules_dir() / f"{name}.state.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


def save_entry(entry: Entry) -> Path:
    _write_json(entry_path(entry.name), asdict(entry))
    return entry_path(entry.name)


def names() -> list[str]:
    folder = schedules_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json")
                  if not p.name.startswith(".tmp-") and not p.name.endswith(".state.json"))


def load_entry(name: str) -> Entry:
    """The entry; BadInput naming NAME and listing the known schedules when there is none."""
    path = entry_path(name)
    if not NAME_RE.match(name or "") or not path.is_file():
        known = ", ".join(names()) or ("(none; add one with `python -m sweeps schedule add NAME "
                                       "+experiment=X --cron '0 2 * * *'`)")
        raise BadInput(f"NAME: no schedule {name!r} under {schedules_dir()}; schedules: {known}")
    if paths.outside_home(path):
        raise BadInput(f"NAME: {paths.outside_home(path)}")
    return Entry(**json.loads(path.read_text()))


def entries() -> list[Entry]:
    out = []
    for n in names():
        try:
            out.append(load_entry(n))
        except (BadInput, TypeError, ValueError):
            continue  # a foreign or corrupt file is not a schedule
    return out


def delete_entry(name: str) -> None:
    entry_path(name).unlink(missing_ok=True)
    state_path(name).unlink(missing_ok=True)


def write_state(name: str, **state: Any) -> None:
    """The last run's outcome (sweep id, status, exit code...), for ``schedule list``."""
    _write_json(state_path(name), {"name": name, "written": time.time(), **state})


def read_state(name: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(state_path(name).read_text())
        return data
    except (OSError, ValueError):
        return None


def apply_env(entry: Entry) -> None:
    """Set the environment ``schedule add`` recorded (a cron entry's line carries only SWEEPS_HOME). The
    SWEEPS_HOME this run found the entry in stays: the folder may have moved since."""
    carried = {k: v for k, v in entry.env.items() if k != "SWEEPS_HOME"}
    os.environ.update(carried)
    log.debug("schedule %s: environment from %s: %s", entry.name, entry_path(entry.name), sorted(carried))


def carried_env() -> dict[str, str]:
    """What the scheduled run needs from today's environment: SWEEPS_HOME (absolute), PATH, and the
    optional settings that change where things go."""
    env = {"SWEEPS_HOME": str(paths.home())}
    for key in ("SWEEPS_CONF_DIR", "RAY_TMPDIR", "MLFLOW_TRACKING_URI"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    seen: list[str] = []
    for part in os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep):
        if part and part not in seen:
            seen.append(part)
    env["PATH"] = os.pathsep.join(seen)
    return env
