"""Which MLflow servers this client writes to: one of its own major version; one of the major version before,
from 2.3 on, without LoggedModels; none other. A store whose schema another MLflow made is named too.

What a 3.x client needs of a 2.x server (read in MLflow's REST stores, and checked against a real 2.22 server):
runs, params, metrics (``log_batch`` ignores the fields a 2.x server does not know: a metric's ``model_id`` and
dataset), tags, proxied artifacts, and the registry (``create_model_version`` from a run's artifacts, aliases
since 2.3) all answer; the LoggedModel API (``/api/2.0/mlflow/logged-models``, MLflow 3.0) answers 404
``ENDPOINT_NOT_FOUND``, so a trial's best checkpoint goes to its run's artifacts there
(:mod:`sweeps.tracking.models`). Before 2.3 the registry has no aliases, which promotion's champion gate moves;
a server of a newer major version may have changed any of it.
"""

from __future__ import annotations

import re

from sweeps.config import redaction
from sweeps.errors import BadInput

FLOOR = (2, 3)  # the oldest server this client writes to: registry aliases (promotion's champion gate)


def server_version(uri: str, timeout_s: float = 5.0) -> str | None:
    """The MLflow server's version (its ``GET /version``), or None when it does not say."""
    import urllib.request as urlrequest

    try:
        with urlrequest.urlopen(uri.rstrip("/") + "/version", timeout=timeout_s) as resp:  # noqa: S310
            text = resp.read(64).decode(errors="replace").strip()
    except Exception:  # an older server, or one behind a proxy: MLflow's own calls decide
        return None
    return text if re.fullmatch(r"\d+\.\d+[\w.+-]*", text) else None


def release(version: str) -> tuple[int, int]:
    """``"2.22.5"`` -> ``(2, 22)``; ``(0, 0)`` for a text that is no version."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def refusal(theirs: str, mine: str) -> str | None:
    """Why this client (MLflow ``mine``) must not write to a server of MLflow ``theirs``; None when it may."""
    if release(theirs)[0] > release(mine)[0]:
        return (f"a newer major version than this client's, whose REST API may differ: install the MLflow the "
                f"server runs here, if sweeps supports it, or run a server of MLflow {release(mine)[0]}.x")
    if release(theirs) < FLOOR:
        return (f"older than {FLOOR[0]}.{FLOOR[1]}, whose registry has no aliases (promotion's champion gate): "
                f"upgrade the server to MLflow {mine} (with every writer stopped: `mlflow db upgrade <its backend "
                f"store>`)")
    return None


def older_major(theirs: str, mine: str) -> bool:
    """A server of an earlier major version than this client (a 2.x one for a 3.x client): no LoggedModels."""
    return release(theirs)[0] < release(mine)[0]


def check_server_version(uri: str, timeout_s: float = 5.0, key: str = "tracking.uri") -> None:
    """BadInput, naming both versions, when the server is one this client cannot safely write to (see
    :func:`refusal`); a server that does not say its version is taken as it answers."""
    import mlflow

    theirs, mine = server_version(uri, timeout_s), mlflow.__version__
    why = refusal(theirs, mine) if theirs else None
    if why:
        raise BadInput(f"{key}: the MLflow server at {uri} runs MLflow {theirs}, this driver MLflow {mine}: "
                       f"{why}")


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
