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
from sweeps.tracking.server import Server, ServerFailed, free_port, port_free, start

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


def serve(uri: str, host: str, port: int, log_path: Path) -> Server:
    """Start the server for ``uri`` (a SQLite folder is created if missing)."""
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    opts = artifact_options(uri)
    return start(uri, host=host, port=port, log_path=log_path,
                 artifacts_destination=opts["artifacts_destination"],
                 default_artifact_root=opts.get("default_artifact_root"))


def wait_until_interrupted(server: Server) -> int:
    """Block until Ctrl-C or SIGTERM (0); raise if the server dies on its own."""
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    raise ServerFailed(f"mlflow server exited with code {server.proc.returncode}:\n{server.log_tail()}")
