"""The MLflow UI for the configured store (``python -m sweeps ui``), on 127.0.0.1 unless told otherwise.

For the embedded SQLite store the server is started with the same artifact folder that sweeps logs into
(:func:`sweeps.tracking.client.artifact_root`), so checkpoints, configs and reports display in the UI. When the
store already is a server (``http(s)://``) there is nothing to start: its URL is printed.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from sweeps import paths
from sweeps.errors import BadInput
from sweeps.tracking.client import artifact_root
from sweeps.tracking.server import Server, ServerFailed, free_port, is_loopback, port_free, start

log = logging.getLogger(__name__)

URI_SCHEMES = r"^(sqlite|postgresql|mysql|mssql|https?|file)(\+\w+)?:"


def store_uri(tracking_uri: str | None) -> str:
    """The store to show: ``--tracking-uri`` or the embedded default; rejects a URI MLflow cannot serve."""
    uri = tracking_uri or paths.default_tracking_uri()
    if not re.match(URI_SCHEMES, uri):
        raise BadInput(f"--tracking-uri: {uri!r} has no supported scheme; use sqlite:///path/mlflow.db, "
                       f"http(s)://HOST:PORT, postgresql://..., mysql://... or file:///path")
    return uri


def artifact_options(uri: str) -> dict[str, str]:
    """Server artifact flags consistent with where sweeps logs artifacts for this store (pure)."""
    root = artifact_root(uri)
    if root is not None:  # sqlite: <db folder>/mlartifacts, both for new experiments and for the proxy
        return {"default_artifact_root": root, "artifacts_destination": root}
    return {"artifacts_destination": (paths.home() / "mlartifacts").resolve().as_uri()}


def check_port(host: str, port: int) -> None:
    if not 0 < port < 65536:
        raise BadInput(f"--port: {port} is not a TCP port (1-65535)")
    if not port_free(host, port):
        raise BadInput(f"--port {port}: {host}:{port} is already in use (another MLflow UI?); pick another, "
                       f"e.g. --port {free_port(host)}, or stop whatever listens there")


AUTH_APP = "basic-auth"  # MLflow's own app: HTTP basic auth on every request, users and permissions


def check_exposure(host: str, auth: bool, insecure: bool) -> str | None:
    """A non-loopback ``--host`` needs ``--auth`` (MLflow's basic-auth app) or an explicit ``--insecure``.

    Returns the warning to print, if any. Raises BadInput when neither is given (nothing is started).
    """
    if is_loopback(host):
        return None
    if auth:
        return (f"--host {host}: the MLflow UI is reachable from the network; every request needs a user and "
                f"password ({AUTH_APP} app). Serve it behind TLS (a reverse proxy) if the network is not trusted")
    if insecure:
        return (f"warning: --host {host} --insecure exposes the MLflow UI and its write API to the network with "
                f"no authentication")
    raise BadInput(f"--host: {host!r} is not a loopback address, and the MLflow UI has no authentication of its "
                   f"own: add --auth (MLflow's {AUTH_APP} app; set MLFLOW_AUTH_ADMIN_PASSWORD for the first start) "
                   f"or, on a network you trust, --insecure")


def auth_env(home: Path) -> dict[str, str]:
    """The basic-auth app's settings: its user database under ``home`` (MLflow's default is ./basic_auth.db).

    Raises:
        BadInput: the user database does not exist yet and ``MLFLOW_AUTH_ADMIN_PASSWORD`` is unset (MLflow
        creates the admin user from it on the first start, and refuses to start without it).
    """
    import os

    db = home / "basic_auth.db"
    if not db.is_file() and not os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD") and not os.environ.get(
            "MLFLOW_AUTH_CONFIG_PATH"):
        raise BadInput("--auth: set MLFLOW_AUTH_ADMIN_PASSWORD for the first start (MLflow creates the user "
                       "'admin' with it; change it later through MLflow's update-password API)")
    import secrets

    # The app's CSRF key: MLflow refuses to start without one; a fresh one per start lives in memory only
    # (sessions end with the server).
    env = {} if os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY") else {
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32)}
    if os.environ.get("MLFLOW_AUTH_CONFIG_PATH"):
        return env
    home.mkdir(parents=True, exist_ok=True)
    ini = home / "mlflow-auth.ini"
    ini.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{db}\nadmin_username = admin\n"
                   f"authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return {**env, "MLFLOW_AUTH_CONFIG_PATH": str(ini)}


def serve(uri: str, host: str, port: int, log_path: Path, auth: bool = False) -> Server:
    """Start the server for ``uri`` (a SQLite folder is created if missing)."""
    import os

    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    opts = artifact_options(uri)
    env = {**os.environ, **auth_env(paths.home())} if auth else None
    return start(uri, host=host, port=port, log_path=log_path, env=env,
                 artifacts_destination=opts["artifacts_destination"],
                 default_artifact_root=opts.get("default_artifact_root"), app_name=AUTH_APP if auth else None)


def wait_until_interrupted(server: Server) -> int:
    """Block until Ctrl-C or SIGTERM (0); raise if the server dies on its own."""
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    raise ServerFailed(f"mlflow server exited with code {server.proc.returncode}:\n{server.log_tail()}")
