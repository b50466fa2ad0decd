"""``python -m sweeps ui``: the MLflow UI for the configured store, on 127.0.0.1 unless told otherwise.

For the embedded SQLite store the server is started with the same artifact folder that sweeps logs into
(:func:`sweeps.tracking.artifact_root`), so checkpoints, configs and reports display in the UI. When the
store already is a server (``http(s)://``) there is nothing to start: its URL is printed.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import time
from pathlib import Path

from sweeps import paths, tracking
from sweeps.errors import BadInput
from sweeps.mlflow_server import Server, ServerFailed, free_port, is_loopback, port_free, start

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
    root = tracking.artifact_root(uri)
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


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def wait_until_interrupted(server: Server) -> int:
    """Block until Ctrl-C or SIGTERM (0); raise if the server dies on its own."""
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    raise ServerFailed(f"mlflow server exited with code {server.proc.returncode}:\n{server.log_tail()}")


def cli_ui(args: argparse.Namespace) -> int:
    """Start the MLflow UI, print its URL, block until Ctrl-C."""
    uri = store_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):
        print(f"The tracking store is an MLflow server; open {uri.rstrip('/')}/#/experiments")  # noqa: T201
        return 0
    check_port(args.host, args.port)
    if not is_loopback(args.host):
        print(f"warning: --host {args.host} exposes the MLflow UI (and its write API, with no "  # noqa: T201
              f"authentication) to the network; use --host 127.0.0.1 unless you mean it")
    log_path = paths.home() / "mlflow-ui.log"
    print(f"starting the MLflow UI for {uri} ...", flush=True)  # noqa: T201
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` must not orphan the server either
    try:
        server = serve(uri, args.host, args.port, log_path)
        try:
            print(f"MLflow UI: {server.experiments_url()}", flush=True)  # noqa: T201
            print(f"(server log: {log_path}; Ctrl-C to stop)", flush=True)  # noqa: T201
            code = wait_until_interrupted(server)
        finally:
            server.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("MLflow UI stopped")  # noqa: T201
    return code
