"""Which MLflow servers the client writes to, and what it does on one of MLflow 2 (no LoggedModels).

Fast tier: which releases are refused (tests/test_mlflow_versions.py refuses them through a server's ``/version``),
and a small real HTTP server on 127.0.0.1 that answers ``/version`` as a 2.x server: no LoggedModels, said once.
Slow tier: a real ``mlflow server`` of MLflow 2.22 from a virtualenv of its own (uv, cached like the other fresh
venvs): a real sweep (``sweeps run``, 2 one-worker trials) keeps each trial's best checkpoint as its run's artifacts
and says so once, ``sweeps promote`` registers from those artifacts; and the same server behind a proxy that hides
its ``/version`` (a server that does not say): the first model's 404 degrades the tracker once (the tracker fed two
trials by hand: what it does with a 404 is the subject, not the sweep).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import FAST, SweepsEnv, mlflow_client
from harness import Sweep

from sweeps.tracking import callback, models, versions
from sweeps.tracking import client as tracking
from sweeps.tracking import server as mlflow_server

OLDER = "2.22.*"  # the newest MLflow 2 release line


class _Answers(BaseHTTPRequestHandler):
    """``/health`` OK; ``/version`` the release in ``server.release`` (404 when None); the rest forwarded to
    ``server.upstream`` when there is one, else 404."""

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        release, upstream = self.server.release, self.server.upstream  # type: ignore[attr-defined]
        if self.path == "/version":
            self._send(200, release.encode()) if release else self._send(404, b"Not Found")
        elif upstream:
            self._forward(upstream)
        elif self.path == "/health":
            self._send(200, b"OK")
        else:
            self._send(404, b"Not Found")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

    def _forward(self, upstream: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        req = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                     headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - 127.0.0.1
                self._send(resp.status, resp.read(), resp.headers.get("Content-Type"))
        except urllib.error.HTTPError as exc:
            self._send(exc.code, exc.read(), exc.headers.get("Content-Type"))

    def _send(self, code: int, body: bytes, kind: str | None = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind or "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(release: str | None, upstream: str | None = None) -> tuple[ThreadingHTTPServer, str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    httpd.release, httpd.upstream = release, upstream  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def fake_server(request: pytest.FixtureRequest) -> Iterator[str]:
    httpd, url = _serve(request.param)
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def _degraded_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_unsupported", {})  # said once per store and process: each test starts clean


@pytest.mark.parametrize("fake_server", ["2.22.5"], indirect=True)
def test_a_server_of_mlflow_2_holds_no_logged_models_said_once(fake_server: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert not models.supported(None, fake_server)
        assert not models.supported(None, fake_server)
    said = [r.getMessage() for r in caplog.records if "LoggedModels" in r.getMessage()]
    assert len(said) == 1 and "runs MLflow 2.22.5" in said[0] and "run's artifacts" in said[0], said


@pytest.mark.parametrize(("theirs", "verdict"), [("2.3.0", None), ("2.22.5", None), ("3.17.2", None),
                                                 ("2.2.9", "older"), ("0.9.1", "older"), ("4.1.0", "newer")])
def test_which_releases_are_refused(theirs: str, verdict: str | None) -> None:
    why = versions.refusal(theirs, "3.17.2")
    assert (why is None) if verdict is None else (why is not None and verdict in why)
    assert versions.older_major(theirs, "3.17.2") is (theirs.split(".")[0] in ("0", "2"))


# -- a real MLflow 2 server (slow tier) -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def older_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``mlflow server`` of MLflow 2.22 (SQLite, proxied artifacts) from a virtualenv of its own, on 127.0.0.1:
    (its URL, its artifacts destination)."""
    from freshvenv import FreshVenv

    root = tmp_path_factory.mktemp("mlflow2")
    venv = FreshVenv(root / "venv")
    venv._uv("venv", "-q", "--python", sys.executable, str(venv.root), what="venv")
    # MLflow 2.22 imports a pool SQLAlchemy 2.1 no longer has
    venv._uv("pip", "install", "-q", "--python", str(venv.python), f"mlflow=={OLDER}", "sqlalchemy<2.1",
             what="mlflow 2")
    port = mlflow_server.free_port()
    log = (root / "server.log").open("w")
    proc = subprocess.Popen([str(venv.root / "bin" / "mlflow"), "server", "--backend-store-uri",
                             f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root,
                            env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while not mlflow_server.healthy(url, timeout_s=2):
            assert proc.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
            time.sleep(1)
        yield url, root / "artifacts"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


def _sweep_of_two(tmp_path: Path, uri: str) -> tuple[Any, str, list[SimpleNamespace]]:
    """Two trials, each with a best checkpoint, ended through the tracker; (client, experiment id, trials)."""
    import pyarrow.fs as pafs

    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, f"older-{tmp_path.name}", uri)
    parent = c.create_run(exp, tags={tracking.RUN_TAG_SWEEP: "s", tracking.RUN_TAG_KIND: "sweep"}).info.run_id
    t = callback._Tracker(uri=uri, experiment_id=exp, parent_run_id=parent, sweep_id="s", metric="val/acc",
                          mode="max", fixed_params={}, epochs=1, storage_path=str(tmp_path))
    trials = []
    for tid in ("a", "b"):
        ck = tmp_path / tid / "checkpoint_000000"
        ck.mkdir(parents=True)
        (ck / "model.pt").write_bytes(b"weights " + tid.encode())
        trial = SimpleNamespace(trial_id=tid, config={"lr": 0.1}, last_result={}, num_failures=0,
                                path=str(tmp_path / tid), checkpoint=None)
        t.on_trial_start(0, [trial], trial)
        trial.last_result = {"val/acc": 0.5, "training_iteration": 1, "timestamp": int(time.time())}
        t.on_trial_result(1, [trial], trial, dict(trial.last_result))
        t.on_checkpoint(1, [trial], trial, SimpleNamespace(path=str(ck), filesystem=pafs.LocalFileSystem()))
        t.on_trial_complete(2, [trial], trial)
        trials.append(trial)
    t.close_open()
    return c, exp, trials


def _files(artifacts: Path, run: Any, folder: str) -> list[str]:
    """A run's files under ``folder`` in the server's artifacts destination. (MLflow 3's
    ``MlflowClient.list_artifacts(run, path)`` also searches the run's LoggedModels, which a 2.x server answers
    with a 404: the files are read where the server keeps them.)"""
    base = artifacts / run.info.experiment_id / run.info.run_id / "artifacts" / folder
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())


def _check_artifacts(c: Any, exp: str, said: list[str], artifacts: Path) -> None:
    runs = c.search_runs([exp], "tags.`sweeps.kind` = 'trial'")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    for r in runs:
        assert _files(artifacts, r, "checkpoint") == ["model.pt"]
        assert [a.path for a in c.list_artifacts(r.info.run_id)] == ["checkpoint"]
        assert "best_model" not in r.data.tags and "sweeps.model_error" not in r.data.tags
    assert len([m for m in said if "LoggedModels" in m]) == 1, said


@pytest.fixture(scope="module")
def older_sweep(older_server: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[SweepsEnv, dict, str]]:
    """A real sweep (``sweeps run``: 2 trials of the quickstart, 1 worker each, trained in their trial's own
    process) logged to the MLflow 2 server: (its env, its index record, what the driver printed)."""
    env = SweepsEnv(tmp_path_factory.mktemp("older-sweep"))
    try:
        proc = env.run("run", "+experiment=quickstart", "scheduler=fifo", "trainable.num_workers=1",
                       "trainable.in_process=true", "sweep.num_samples=2", "report.enabled=false", *FAST,
                       "trainable.params.epochs=2", f"tracking.uri={older_server[0]}", timeout=600, check=True)
        yield env, Sweep.only(env).record(), proc.stdout + proc.stderr
    finally:
        env.cleanup()


@pytest.mark.slow
def test_a_real_sweep_on_a_mlflow_2_server_keeps_run_artifacts_says_so_once_and_promotes(
        older_server: tuple[str, Path], older_sweep: tuple[SweepsEnv, dict, str]) -> None:
    """The sweep's driver says once that the server holds no LoggedModels; each trial's best checkpoint is its
    run's artifacts; ``sweeps promote`` registers a version from the best trial's run artifacts. Shares the
    module's sweep against the real MLflow 2 server (fixture ``older_sweep``)."""
    url, artifacts = older_server
    env, rec, printed = older_sweep
    said = [line for line in printed.splitlines() if "LoggedModels" in line]
    assert len(said) == 1 and "runs MLflow 2.22" in said[0], said
    c = mlflow_client(url)
    runs = c.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.kind` = 'trial'")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}, [r.info.status for r in runs]
    for r in runs:
        assert "model.pt" in _files(artifacts, r, "checkpoint"), _files(artifacts, r, "")
        assert [a.path for a in c.list_artifacts(r.info.run_id)] == ["checkpoint"]
        assert "best_model" not in r.data.tags and "sweeps.model_error" not in r.data.tags, r.data.tags
    proc = env.run("promote", "latest", "--model-name", "older-digits", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    best = max(runs, key=lambda r: max(m.value for m in c.get_metric_history(r.info.run_id, "val/acc")))
    mv = mlflow_client(url).get_model_version_by_alias("older-digits", "champion")
    assert (mv.version, mv.run_id) == ("1", best.info.run_id), (mv.version, mv.run_id, best.info.run_id)
    assert mv.source.startswith(f"runs:/{best.info.run_id}/") or best.info.run_id in mv.source, mv.source
    assert "MLmodel" in _files(artifacts, best, mv.source.rsplit("/", 1)[-1]), mv.source


@pytest.mark.slow
def test_a_server_that_does_not_say_its_version_is_found_out_by_its_404_once(
        older_server: tuple[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    httpd, url = _serve(None, upstream=older_server[0])  # the real MLflow 2 server, its /version hidden
    try:
        assert versions.server_version(url) is None and models.supported(None, url)
        with caplog.at_level(logging.WARNING):
            c, exp, _ = _sweep_of_two(tmp_path, url)
        said = [r.getMessage() for r in caplog.records]
        _check_artifacts(c, exp, said, older_server[1])
        assert any("answers 404 to its LoggedModel API" in m for m in said), said
        assert not any("will retry" in m or "unreachable" in m for m in said), "never taken for an outage"
    finally:
        httpd.shutdown()
        httpd.server_close()
        shutil.rmtree(tmp_path / "a", ignore_errors=True)
