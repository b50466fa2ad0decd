"""No secret at rest: three kinds of secret planted in one real sweep, then every byte the sweep left is searched.

The sweep logs to a real ``mlflow server`` running MLflow's basic-auth app, so the password in
``tracking.uri=http://admin:PASSWORD@127.0.0.1:PORT`` is really needed (and really used); a secret-named key is
typed on the command line (and reaches every Train worker); a third comes from ``${oc.env:...}`` under a key
whose name says nothing. Afterwards every file under the test's folder (SWEEPS_HOME: Ray storage with
``tuner.pkl`` and ``params.json``, the index, MLflow's SQLite stores and artifacts; reports/; the server's
folder and log; Ray's session logs) and the captured stdout/stderr are read as bytes. Slow tier.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from harness import Sweep

pytestmark = pytest.mark.slow

CLI_SECRET = "Cli-Secret-4417qz"
ENV_SECRET = "Env-Secret-7731qz"
URI_SECRET = "Uri-Secret-2290qz"
SECRETS = (CLI_SECRET, ENV_SECRET, URI_SECRET)


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def _leaks(roots: list[Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for root in roots:
        for p in _files(root):
            try:
                data = p.read_bytes()
            except OSError:
                continue  # a socket or a file Ray removed meanwhile
            for s in SECRETS:
                if s.encode() in data:
                    found.setdefault(s, []).append(str(p))
    return found


def test_no_secret_at_rest_after_a_real_sweep(sweep: Sweep, tmp_path: Path) -> None:
    """Why its own sweep: every byte under its folder is searched after it, so nothing else may share the folder."""
    from sweeps.tracking import server as mlflow_server

    env = sweep.env
    srv_dir = tmp_path / "server"
    srv_dir.mkdir()
    ini = srv_dir / "auth.ini"
    ini.write_text(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///{srv_dir / 'auth.db'}\n"
                   f"admin_username = admin\nauthorization_function = "
                   f"mlflow.server.auth:authenticate_request_basic_auth\n")
    server = mlflow_server.start(
        f"sqlite:///{srv_dir / 'mlflow.db'}", artifacts_destination=srv_dir / "artifacts",
        log_path=srv_dir / "server.log", app_name="basic-auth",
        env={**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_AUTH_ADMIN_PASSWORD": URI_SECRET,
             "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key-for-the-test"})
    try:
        uri = f"http://admin:{URI_SECRET}@127.0.0.1:{server.port}"
        proc = env.run(
            "run", "+experiment=quickstart", "sweep.num_samples=2", "sweep.max_concurrent_trials=2",
            "scheduler=fifo", "trainable.num_workers=1", "trainable.params.epochs=2", "report.enabled=true",
            "cluster.worker_start_timeout_s=60", f"tracking.uri={uri}",
            f"+trainable.params.api_token={CLI_SECRET}", "+trainable.params.note=${oc.env:SWEEPS_DB_PASSWORD}",
            "+trainable.params.tokenizer_name=gpt2",
            timeout=900, extra_env={"SWEEPS_DB_PASSWORD": ENV_SECRET}, check=True)
        sweep_id = re.search(r"^sweep (\S+): finished", proc.stdout, re.MULTILINE).group(1)  # type: ignore[union-attr]

        # the sweep really went through the authenticated server, with every secret in force
        from mlflow.tracking import MlflowClient

        os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = "admin", URI_SECRET
        try:
            c = MlflowClient(server.url)
            runs = c.search_runs([c.get_experiment_by_name("quickstart").experiment_id], max_results=10)
        finally:
            del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
        parent = next(r for r in runs if r.data.tags.get("sweeps.kind") == "sweep")
        children = [r for r in runs if r.data.tags.get("sweeps.kind") == "trial"]
        assert parent.data.tags["sweeps.sweep_id"] == sweep_id and len(children) == 2
        assert {r.info.status for r in runs} == {"FINISHED"}
        assert all(r.data.params["api_token"] == "***REDACTED***" for r in children)
        assert all(r.data.params["note"] == "***REDACTED***" for r in children)
        assert all(r.data.params["tokenizer_name"] == "gpt2" for r in children), "an ordinary value was redacted"
        assert parent.data.tags["sweeps.allowed_targets"] == "(none)"

        # what was searched really holds the places a leak would be
        exp_dir = env.home / "ray" / sweep_id
        assert (exp_dir / "tuner.pkl").is_file() and list(exp_dir.rglob("params.json"))
        assert (env.home / "sweeps" / f"{sweep_id}.json").is_file() and list((srv_dir / "artifacts").rglob("*"))
        assert list((env.root / "reports").rglob("*.md")) and list(env.ray_tmp.rglob("*.log"))

        leaks = _leaks([env.root, env.ray_tmp])
        for s in SECRETS:
            for stream in (proc.stdout, proc.stderr):
                if s in stream:
                    leaks.setdefault(s, []).append("captured stdout/stderr")
        assert not leaks, f"secrets at rest: {leaks}"
    finally:
        server.stop()
