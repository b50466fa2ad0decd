"""Start and stop a real ``mlflow server`` process on this machine, for ``sweeps ui`` and for tests.

The server is lean on purpose (docs/mlflow.md): one uvicorn worker and no job-execution runners
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``; MLflow 3.17 otherwise starts ~8 huey consumers of ~235 MB each,
which sweeps never uses). It runs in its own process group, so Ctrl-C in the terminal does not reach it and
:meth:`Server.stop` can end the launcher and its uvicorn child together.

Example:
    >>> with start("sqlite:////tmp/x/mlflow.db", artifacts_destination="/tmp/x/artifacts") as srv:
    ...     print(srv.url)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from sweeps import ports
from sweeps.errors import BadInput, SweepsError

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
LEAN_ENV = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no huey job runners
    "MLFLOW_SERVER_JOB_ENABLE_PERIODIC_TASKS": "false",
}


class ServerFailed(SweepsError):
    """The ``mlflow server`` process exited or did not answer ``/health`` in time."""


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on right now (the OS picks it), never one of Ray's default ports."""
    return ports.free_port(host)


def port_free(host: str, port: int) -> bool:
    """True when a server could bind ``host:port`` (SO_REUSEADDR, as uvicorn binds: TIME_WAIT is free)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def url_host(host: str) -> str:
    """The host to put in a URL a browser opens: wildcard binds are reached through the loopback address."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def server_command(backend_uri: str, host: str, port: int, *, artifacts_destination: str | None = None,
                   default_artifact_root: str | None = None, workers: int = 1,
                   app_name: str | None = None) -> list[str]:
    """The ``mlflow server`` argv (pure).

    With ``artifacts_destination`` only, new experiments get ``mlflow-artifacts:/`` locations and clients
    upload through the server (what a remote cluster needs). With ``default_artifact_root`` too, new
    experiments point straight at that URI (what the embedded SQLite store uses, see
    :func:`sweeps.tracking.artifact_root`).
    """
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--host", host,
           "--port", str(port), "--workers", str(workers)]
    if default_artifact_root:
        cmd += ["--default-artifact-root", default_artifact_root]
    if artifacts_destination:
        cmd += ["--artifacts-destination", artifacts_destination]
    if app_name:
        cmd += ["--app-name", app_name]  # e.g. basic-auth: every request needs a user and password
    return cmd


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the server process: the caller's, plus the lean settings (caller's values win)."""
    env = dict(os.environ if base is None else base)
    for k, v in LEAN_ENV.items():
        env.setdefault(k, v)
    return env


@dataclass
class Server:
    """A running ``mlflow server``; use as a context manager or call :meth:`stop`."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}"

    def experiments_url(self, experiment_id: str | None = None) -> str:
        """The page a user opens: the experiment list, or one experiment's training-runs table."""
        if experiment_id is None:
            return f"{self.url}/#/experiments"
        return f"{self.url}/#/experiments/{experiment_id}/runs"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the server's process group (launcher + uvicorn), then SIGKILL what is left."""
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("mlflow server (pid %d) ignored SIGTERM for %gs; killing it", self.proc.pid,
                            timeout_s)
        _signal_group(self.proc.pid, signal.SIGKILL)  # uvicorn may outlive the launcher
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        return self.proc.returncode

    def __enter__(self) -> Server:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``url/health`` answers 200."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as resp:  # noqa: S310
            return int(resp.status) == 200
    except OSError:
        return False


def wait_healthy(server: Server, timeout_s: float = 120.0) -> None:
    """Block until the server answers ``/health``.

    Raises:
        ServerFailed: the process exited, or did not answer within ``timeout_s`` (it is stopped then).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerFailed(f"mlflow server exited with code {server.proc.returncode} before answering "
                               f"/health:\n{server.log_tail()}")
        if healthy(server.url, timeout_s=1.0):
            return
        time.sleep(0.25)
    server.stop()
    raise ServerFailed(f"mlflow server at {server.url} did not answer /health within {timeout_s:g}s:\n"
                       f"{server.log_tail()}")


def start(backend_uri: str, *, host: str = "127.0.0.1", port: int | None = None,
          artifacts_destination: str | Path | None = None, default_artifact_root: str | None = None,
          log_path: Path | None = None, env: dict[str, str] | None = None,
          timeout_s: float = 120.0, app_name: str | None = None) -> Server:
    """Start ``mlflow server`` for ``backend_uri`` and return once it answers ``/health``.

    Args:
        backend_uri: the store (``sqlite:///abs/path/mlflow.db``, ``postgresql://...``).
        host: interface to bind; loopback by default.
        port: a fixed port (must be free), or None for a free one.
        artifacts_destination: folder or URI where the server keeps proxied artifacts.
        default_artifact_root: artifact URI for new experiments (skips the proxy).
        log_path: file for the server's stdout/stderr (else discarded).
        env: base environment (default: this process's).
        timeout_s: how long to wait for ``/health``.
        app_name: an MLflow server app, e.g. ``basic-auth``.

    Raises:
        BadInput: the port is in use.
        ServerFailed: the server did not come up.
    """
    port = free_port(host) if port is None else port
    if not port_free(host, port):
        raise BadInput(f"--port {port}: {host}:{port} is already in use; pick another (e.g. --port "
                       f"{free_port(host)}) or stop whatever listens there")
    if isinstance(artifacts_destination, Path):
        artifacts_destination.mkdir(parents=True, exist_ok=True)
        artifacts_destination = str(artifacts_destination.resolve())
    cmd = server_command(backend_uri, host, port, artifacts_destination=artifacts_destination,
                         default_artifact_root=default_artifact_root, app_name=app_name)
    out: IO[bytes] | int = subprocess.DEVNULL
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        out = log_path.open("ab")
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=server_env(env), start_new_session=True)
    finally:
        if not isinstance(out, int):
            out.close()  # the child holds its own descriptor
    server = Server(proc=proc, host=host, port=port, log_path=log_path)
    log.debug("started mlflow server pid %d: %s", proc.pid, " ".join(cmd))
    try:
        wait_healthy(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server
