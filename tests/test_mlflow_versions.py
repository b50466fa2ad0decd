"""An MLflow server or store this client cannot safely write to is refused before anything starts, naming both versions.

The server: a real HTTP server on 127.0.0.1 that answers ``GET /version`` (and ``/health``) as an MLflow server of
another release would: the check reads nothing else, so a stub of those two answers is the whole subject. The
store: a real SQLite store made by this MLflow, whose Alembic revision is then set back (MLflow's own migration
config) or forward (as a newer MLflow would leave it); MLflow itself refuses it, and the refusal is put in one line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import mlflow
import pytest

from sweeps.errors import BadInput
from sweeps.tracking import client as mc
from sweeps.tracking.versions import check_server_version, schema_error


@contextmanager
def mlflow_server_of(version: str | None) -> Iterator[str]:
    """A server that says it runs MLflow ``version`` (None: one that has no ``/version``, as before MLflow 2)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            said = {"/health": "OK", "/version": version}.get(self.path)
            self.send_response(200 if said else 404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write((said or "not found").encode())

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("theirs", "why"), [("4.0.1", "newer major version"), ("2.2.0", "older than 2.3")])
def test_a_server_of_another_mlflow_is_refused_naming_both_versions(theirs: str, why: str) -> None:
    with mlflow_server_of(theirs) as uri:
        with pytest.raises(BadInput) as refused:
            check_server_version(uri, timeout_s=5)
        with pytest.raises(BadInput) as probed:
            mc.probe(uri, timeout_s=5)  # the pre-start probe of every run goes through the same check
    line = str(refused.value)
    assert f"runs MLflow {theirs}" in line and f"this driver MLflow {mlflow.__version__}" in line, line
    assert why in line and line.startswith("tracking.uri:") and "\n" not in line, line
    assert str(probed.value) == line


@pytest.mark.parametrize("theirs", ["2.22.0", "3.0.0", mlflow.__version__, None])
def test_a_server_this_client_writes_to_passes(theirs: str | None) -> None:
    with mlflow_server_of(theirs) as uri:
        check_server_version(uri, timeout_s=5)
        mc.probe(uri, timeout_s=5)


def mc_head(uri: str) -> str:
    """The revision this MLflow writes (its migrations' head)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    return str(ScriptDirectory.from_config(_get_alembic_config(uri)).get_current_head())


@pytest.fixture(scope="module")
def fresh_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store made by this MLflow (in a child process: MLflow caches the stores a process opened)."""
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    code = ("from mlflow.tracking import MlflowClient; u = 'sqlite:///' + __import__('sys').argv[1]; "
            "MlflowClient(tracking_uri=u, registry_uri=u).search_experiments()")
    made = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    return db


def _store_at(fresh: Path, folder: Path, revision: str) -> tuple[str, str]:
    """A copy of ``fresh`` recorded at ``revision``: ``"-1"`` is the revision before MLflow's newest (Alembic's
    own stamp, through MLflow's migration config); any other text is written as a newer MLflow would leave it.
    Returns the store's URI and the revision it records."""
    import sqlalchemy
    from alembic import command
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    shutil.copy(fresh, folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    config = _get_alembic_config(uri)
    if revision == "-1":
        script = ScriptDirectory.from_config(config)
        command.stamp(config, script.get_revision(script.get_current_head()).down_revision)
    else:
        with sqlalchemy.create_engine(uri).begin() as db:
            db.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    with sqlalchemy.create_engine(uri).connect() as db:
        return uri, str(db.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar())


@pytest.mark.parametrize("revision", ["-1", "f00dfacecafe"], ids=["older", "newer"])
def test_a_store_another_mlflow_made_is_refused_naming_both_versions(
        fresh_store: Path, tmp_path: Path, revision: str) -> None:
    from sweeps.ops.launch import _open_store

    uri, recorded = _store_at(fresh_store, tmp_path, revision)
    assert recorded != mc_head(uri)
    with pytest.raises(Exception) as mlflows_own:
        mc.client(uri)
    line = schema_error(uri, mlflows_own.value)
    assert line is not None, f"not recognised as a schema mismatch: {mlflows_own.value}"
    text = str(line)
    assert f"(revision {recorded})" in text and f"MLflow {mlflow.__version__}" in text, text
    assert "mlflow db upgrade" in text and "\n" not in text, text
    with pytest.raises(BadInput) as opened:  # what a run says, before anything starts
        _open_store(uri)
    assert str(opened.value) == text
    assert schema_error(uri, ConnectionError("database is locked")) is None
