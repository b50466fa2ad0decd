"""A real multi-node Ray cluster on one machine (a head and three worker nodes, each its own raylet), a real
`mlflow server`, shared storage: trials spread over nodes, and a sweep survives losing a node. Slow tier."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import SweepsEnv, wait_for

from sweeps.tracking import server as mlflow_server

pytestmark = pytest.mark.slow


def _rows(d: Path) -> list[dict]:
    f = d / "result.json"
    return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    from ray.cluster_utils import Cluster

    env = SweepsEnv(tmp_path)
    for k in ("HOME", "RAY_TMPDIR"):
        monkeypatch.setenv(k, env.env[k])
    (env.ray_tmp / "ray").mkdir(parents=True, exist_ok=True)
    c = Cluster(initialize_head=True, connect=False,
                head_node_args={"num_cpus": 2, "resources": {"driver_slot": 2},
                                "include_dashboard": True, "temp_dir": str(env.ray_tmp),
                                "dashboard_port": mlflow_server.free_port()})
    workers = [c.add_node(num_cpus=2, resources={"worker_slot": 2}) for _ in range(3)]
    c.wait_for_nodes()
    yield env, c, workers
    c.shutdown()
    env.cleanup()


def test_sweep_spreads_over_nodes_and_survives_losing_one(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    env, c, workers = cluster
    (tmp_path / "server").mkdir()
    srv = mlflow_server.start(f"sqlite:///{tmp_path / 'server' / 'mlflow.db'}",
                              artifacts_destination=tmp_path / "server" / "artifacts")
    shared = tmp_path / "shared"
    try:
        proc = env.popen(
            "run", "+experiment=quickstart", "cluster=remote", f"cluster.address={c.address}",
            f"tracking.uri={srv.url}", f"storage.path={shared}", "scheduler=fifo", "sweep.num_samples=2",
            "sweep.max_concurrent_trials=2", "search_space.lr={dist: choice, values: [0.03]}",
            "trainable.num_workers=2", "trainable.resources_per_worker={CPU: 1, worker_slot: 1}",
            "cluster.driver_resources={driver_slot: 1}", "trainable.params.epochs=8",
            "failure.worker_max_failures=3", "failure.max_failures=2", "report.enabled=false")

        def progress() -> dict[str, list[dict]] | None:
            recs = list((env.home / "sweeps").glob("*.json")) if (env.home / "sweeps").is_dir() else []
            if not recs:
                return None
            exp = Path(json.loads(recs[0].read_text())["experiment_dirs"][0])
            rows = {d.name: _rows(d) for d in exp.iterdir() if d.is_dir()} if exp.is_dir() else {}
            return rows if len(rows) == 2 and all(len(r) >= 2 for r in rows.values()) else None

        rows = wait_for(progress, 400, interval=2, what="both trials training")
        nodes_before = {r[-1]["node_id"] for r in rows.values()}
        assert len(nodes_before) == 2, "the two trials run on two different nodes"
        victim_id = sorted(nodes_before)[0]
        victim = next(w for w in workers if w.node_id == victim_id)
        c.remove_node(victim)  # a worker node dies mid-sweep
        t_lost = time.time()
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out[-5000:]
        (rec_path,) = list((env.home / "sweeps").glob("*.json"))
        rec = json.loads(rec_path.read_text())
        assert rec["counts"]["total"] == 2 and rec["counts"]["failed"] == 0
        exp = Path(rec["experiment_dirs"][0])
        for d in (d for d in exp.iterdir() if d.is_dir()):
            trial_rows = _rows(d)
            epochs = [r["epoch"] for r in trial_rows]
            assert epochs[-1] == 8 and epochs.count(1) == 1, epochs
            after = [r for r in trial_rows if r["timestamp"] > t_lost + 1]
            assert all(r["node_id"] != victim_id for r in after)
        assert os.path.isdir(shared / rec["sweep_id"])
    finally:
        srv.stop()


def test_remote_cluster_refuses_local_store(tmp_path: Path) -> None:
    env = SweepsEnv(tmp_path, seed_store=False)
    proc = env.run("run", "+experiment=quickstart", "cluster=remote", "cluster.address=127.0.0.1:1")
    assert proc.returncode == 2
    assert "tracking.uri" in proc.stderr and "local store" in proc.stderr
    assert not env.home.exists()
