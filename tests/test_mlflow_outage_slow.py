"""The MLflow server stops mid-sweep, while the trials train, and comes back: training goes on, no metric is
lost, no run stays RUNNING. Real `mlflow server` process on 127.0.0.1. Slow tier.

The outage is tied to events, not to a clock: the server stops once MLflow holds a child run's first epochs,
and comes back once the driver has said that results which arrived meanwhile were buffered for retry.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import mlflow_client, wait_for
from harness import Sweep

from sweeps.tracking import server as mlflow_server

pytestmark = pytest.mark.slow
EPOCHS = 10


def _reader(proc) -> list[str]:  # noqa: ANN001
    """The driver's output, line by line as it comes (a thread drains the pipe)."""
    lines: list[str] = []

    def drain() -> None:
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=drain, daemon=True).start()
    return lines


def test_server_outage_loses_no_metric(sweep: Sweep, tmp_path: Path) -> None:
    env = sweep.env
    store = f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}"
    (tmp_path / "server").mkdir()
    artifacts = tmp_path / "server" / "artifacts"
    port = mlflow_server.free_port()
    srv = mlflow_server.start(store, port=port, artifacts_destination=artifacts, log_path=tmp_path / "srv.log")
    try:
        uri = srv.url
        proc = env.popen("run", "+experiment=quickstart", "scheduler=fifo", "sweep.num_samples=2",
                         "search_space.lr={dist: choice, values: [0.03]}", "trainable.num_workers=1",
                         f"trainable.params.epochs={EPOCHS}", "+trainable.params.epoch_sleep_s=1",
                         "report.enabled=false", f"tracking.uri={uri}")
        out = _reader(proc)
        c = mlflow_client(uri)

        def logged_steps() -> int:
            """The most val/acc steps MLflow holds for one child run."""
            runs = c.search_runs([e.experiment_id for e in c.search_experiments()], "tags.`sweeps.kind` = 'trial'")
            return max((len(c.get_metric_history(r.info.run_id, "val/acc")) for r in runs), default=0)

        wait_for(lambda: logged_steps() >= 2, 300, what="a child run's first epochs in MLflow")
        srv.stop()
        wait_for(lambda: any("buffered for retry" in line for line in out), 120,
                 what="the driver buffering results that came while MLflow was down")
        assert proc.poll() is None, "the sweep must still be training when MLflow comes back"
        srv = mlflow_server.start(store, port=port, artifacts_destination=artifacts,
                                  log_path=tmp_path / "srv2.log")
        proc.wait(timeout=600)
        assert proc.returncode == 0, "".join(out)[-4000:]
        rec = Sweep.only(env).record()
        children = c.search_runs([rec["mlflow_experiment_id"]],
                                 f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
        assert len(children) == 2
        for run in children:
            assert run.info.status == "FINISHED"
            steps = sorted(m.step for m in c.get_metric_history(run.info.run_id, "val/acc"))
            assert steps == list(range(1, EPOCHS + 1)), f"metrics lost during the outage: {steps}"
        assert c.get_run(rec["parent_run_id"]).info.status == "FINISHED"
    finally:
        srv.stop()
