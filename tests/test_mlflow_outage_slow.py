"""The MLflow server stops for a while mid-sweep and comes back: training goes on, no metric is lost, no run
stays RUNNING. Real `mlflow server` process on 127.0.0.1. Slow tier."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import SweepsEnv, mlflow_client, wait_for

from sweeps.tracking import server as mlflow_server

pytestmark = pytest.mark.slow


def test_server_outage_loses_no_metric(tmp_path: Path) -> None:
    env = SweepsEnv(tmp_path)
    store = f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}"
    (tmp_path / "server").mkdir()
    artifacts = tmp_path / "server" / "artifacts"
    port = mlflow_server.free_port()
    srv = mlflow_server.start(store, port=port, artifacts_destination=artifacts, log_path=tmp_path / "srv.log")
    try:
        uri = srv.url
        proc = env.popen("run", "+experiment=quickstart", "scheduler=fifo", "sweep.num_samples=2",
                         "search_space.lr={dist: choice, values: [0.03]}", "trainable.num_workers=1",
                         "trainable.params.epochs=10", "report.enabled=false", f"tracking.uri={uri}")

        def reported() -> bool:
            recs = list((env.home / "sweeps").glob("[!.]*.json")) if (env.home / "sweeps").is_dir() else []
            if not recs:
                return False
            exp = Path(json.loads(recs[0].read_text())["experiment_dirs"][0])
            files = [d / "result.json" for d in exp.iterdir() if d.is_dir()] if exp.is_dir() else []
            return any(f.is_file() and len(f.read_text().splitlines()) >= 2 for f in files)

        wait_for(reported, 300, what="first results")
        srv.stop()
        time.sleep(25)  # the trials keep training while MLflow is down
        srv = mlflow_server.start(store, port=port, artifacts_destination=artifacts,
                                  log_path=tmp_path / "srv2.log")
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-4000:]
        assert "buffered for retry" in out, "the outage must overlap the sweep's logging (no buffering seen)"
        (rec_path,) = list((env.home / "sweeps").glob("[!.]*.json"))
        rec = json.loads(rec_path.read_text())
        c = mlflow_client(uri)
        children = c.search_runs([rec["mlflow_experiment_id"]],
                                 f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
        assert len(children) == 2
        for run in children:
            assert run.info.status == "FINISHED"
            steps = sorted(m.step for m in c.get_metric_history(run.info.run_id, "val/acc"))
            assert steps == list(range(1, 11)), f"metrics lost during the outage: {steps}"
        assert c.get_run(rec["parent_run_id"]).info.status == "FINISHED"
    finally:
        srv.stop()
        env.cleanup()
