"""An MLflow store this client can write to safely: a server of its own major version, a schema it knows."""

from __future__ import annotations

import re

from sweeps.config import redaction
from sweeps.errors import BadInput


def server_version(uri: str, timeout_s: float = 5.0) -> str | None:
    """The MLflow server's version (its ``GET /version``), or None when it does not say."""
    import urllib.request as urlrequest

    try:
        with urlrequest.urlopen(uri.rstrip("/") + "/version", timeout=timeout_s) as resp:  # noqa: S310
            text = resp.read(64).decode(errors="replace").strip()
    except Exception:  # an older server, or one behind a proxy: MLflow's own calls decide
        return None
    return text if re.fullmatch(r"\d+\.\d+[\w.+-]*", text) else None


def check_server_version(uri: str, timeout_s: float = 5.0, key: str = "tracking.uri") -> None:
    """BadInput when the server runs another major MLflow version than this client (their REST APIs differ:
    MLflow 3 logs models and traces a 2.x server does not know)."""
    import mlflow

    theirs, mine = server_version(uri, timeout_s), mlflow.__version__
    if theirs and theirs.split(".")[0] != mine.split(".")[0]:
        raise BadInput(f"{key}: the MLflow server at {uri} runs MLflow {theirs}, this driver MLflow {mine}; a "
                       f"client writes safely only to a server of its own major version: install "
                       f"mlflow=={theirs} here, or upgrade the server to MLflow {mine.split('.')[0]}.x (with every "
                       f"writer stopped: `mlflow db upgrade <its backend store>`)")


def schema_error(uri: str, exc: BaseException) -> BadInput | None:
    """A store whose database schema another MLflow version made, as one line naming both; else None."""
    import mlflow

    text = str(exc)
    if "database schema" not in text and "alembic" not in text.lower():
        return None
    found = re.search(r"found version (\w+)", text)
    return BadInput(f"tracking.uri: the store {redaction.public_uri(uri)} has a database schema "
                    f"{'(revision ' + found.group(1) + ') ' if found else ''}that MLflow {mlflow.__version__} "
                    f"does not write: stop every process that writes to it, back it up and run `mlflow db upgrade "
                    f"{redaction.public_uri(uri)}`, or install the MLflow version that made it")
