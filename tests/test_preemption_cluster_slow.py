"""Spot capacity on a real cluster: a worker node drained with a preemption notice mid-trial (``ray drain-node
--reason DRAIN_NODE_REASON_PREEMPTION``, the path of a spot reclaim and of a KubeRay pod's SIGTERM). Slow tier,
marked ``cluster``; nodes without this project (tests/cluster_harness.py), S3 (moto), an MLflow server.

Layout: a 0-CPU head; a "stable" node of 1 CPU that holds the trial's driver and Train controller
(``cluster.driver_resources``: drivers pinned off spot capacity, docs/cluster.md); a "spot" node where the trial's
one Train worker runs; a third node added once the trial trains there (an autoscaler's replacement capacity).
Every failure budget is 0: a preemption counted as a failure ends the trial in ERROR.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import wait_until
from conftest import SweepsEnv, mlflow_client
from test_cluster_slow import Parts, kill_group, live_rows, record, s3_rows, standing

pytestmark = [
    pytest.mark.slow, pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None
                       or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0,
                       reason="worker nodes without the project need root and a working `unshare -m`"),
]

# No scheduled checkpoint within the trial (every 100 epochs of 60): a checkpoint to resume from can only be the
# notice's. 1.5 s epochs: time to add the replacement node and drain before the trial ends.
EPOCHS, EVERY, DEADLINE_S = 60, 100, 20
SPOT = ["+experiment=quickstart", "trainable.num_workers=1", "trainable.in_process=false",
        "trainable.resources_per_worker.CPU=1", "+cluster.driver_resources={stable: 1}", "cluster.driver_cpus=1",
        f"trainable.params.epochs={EPOCHS}", f"trainable.checkpoint_every={EVERY}", "trainable.params.batch_size=8",
        "+trainable.params.epoch_sleep_s=1.5", "scheduler=fifo", "sweep.num_samples=1", "report.enabled=false",
        "failure.worker_max_failures=0", "failure.max_failures=0", "failure.max_preemption_failures=2",
        "cluster.health_check_interval_s=0.1", "cluster.worker_start_timeout_s=180", "cluster.wait_for_resources_s=300"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    with standing(tmp_path_factory.mktemp("spot"), dashboard=False) as p:
        yield p


@pytest.mark.timeout(1500)
def test_a_preemption_notice_checkpoints_and_the_trial_resumes_on_another_node(parts: Parts, tmp_path: Path) -> None:
    """The trial's loop sees Train's notice, checkpoints at once (off its every-6-epochs schedule), and after the
    deadline its worker group restarts on the third node from that checkpoint: no reported epoch is redone (only
    the one in flight), Train charges it to ``max_preemption_failures`` (every failure budget is 0), the loop
    counts 1 preemption, and the run in MLflow says so. Why its own sweep and cluster: no other test drains a node
    with a notice, and the layout (drivers pinned to a stable node, the worker alone on the spot one, a third node
    joining mid-trial) is what the promise is about."""
    env = SweepsEnv(tmp_path, seed_store=False)
    c = parts.cluster
    stable = c.start_worker(1, resources={"stable": 1}, env=parts.s3.env)
    spot = c.start_worker(2, env={**parts.s3.env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "45"})
    said = env.run("doctor", "--address", c.address, timeout=300, extra_env=parts.driver_env())
    doctor = said.stdout + said.stderr
    assert re.search(rf"worker {spot.node_id[:8]} \([^)]*\): `ray start --block` drains for 45 s on SIGTERM "
                     r"\(RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=45\)", doctor), doctor
    assert "terminationGracePeriodSeconds" in doctor, doctor
    proc = env.popen("run", *SPOT, *parts.remote(), f"storage.path={parts.s3.uri('spot')}",
                     extra_env=parts.driver_env())
    try:
        def training_on_spot() -> tuple[str, int] | None:
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read()[-4000:] if proc.stdout else "driver exited")
            sid = record(env).get("sweep_id")
            for name, rows in (live_rows(c, sid) if sid else {}).items():
                if rows and rows[-1]["epoch"] >= 2:
                    assert rows[-1]["node_id"] == spot.node_id, "the Train worker must start on the spot node"
                    return name, rows[-1]["epoch"]
            return None

        name, _ = wait_until(training_on_spot, 420, "the trial past epoch 2 on the spot node", interval=0.3)
        spare = c.start_worker(2, env=parts.s3.env)  # replacement capacity, as an autoscaler adds it
        at = live_rows(c, record(env)["sweep_id"])[name][-1]["epoch"]
        assert at < EPOCHS - 15, f"the trial is nearly done before the drain (epoch {at})"
        t_drain = time.time()
        drain = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "drain-node", "--address", c.address, "--node-id",
             spot.node_id, "--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "test",
             "--deadline-remaining-seconds", str(DEADLINE_S)], env=c.client_env(), capture_output=True, text=True,
            timeout=120)
        assert drain.returncode == 0, drain.stdout + drain.stderr
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, out[-6000:]
    rec = record(env)
    assert rec["counts"] == {**rec["counts"], "total": 1, "completed": 1, "failed": 0}, (rec["counts"], out[-3000:])
    rows = s3_rows(rec["experiment_dirs"][0])[name]
    story = [(r["epoch"], r["node_id"][:8], r.get("restored_epoch"), r.get("sweeps/preemptions"),
              r.get("sweeps/resumed_epoch"), round(r["timestamp"] - t_drain, 1)) for r in rows]
    last_spot = max(i for i, r in enumerate(rows) if r["node_id"] == spot.node_id)
    before, after = rows[:last_spot + 1], rows[last_spot + 1:]
    assert after and all(r["node_id"] == spare.node_id for r in after), story
    resumed = after[0]
    assert resumed["sweeps/preemptions"] == 1 and resumed["restored_epoch"] == resumed["sweeps/resumed_epoch"], story
    assert resumed["restored_epoch"] > at, f"not a checkpoint saved on the notice: {story}"
    assert resumed["restored_epoch"] == before[-1]["epoch"], f"a reported epoch was redone: {story}"
    assert resumed["epoch"] == resumed["restored_epoch"] + 1 and rows[-1]["epoch"] == EPOCHS, story
    assert rows[-1]["sweeps/preemptions"] == 1, story
    print(f"spot: notice at epoch ~{at}, resumed from epoch {resumed['restored_epoch']} "
          f"{resumed['timestamp'] - t_drain:.1f} s after the drain (deadline {DEADLINE_S} s): {story}")
    # Train's own word: the restart was charged to the preemption budget (the controller runs on the stable node)
    logs = [f for f in glob.glob(str(stable.temp_dir / "session_*" / "logs" / "**"), recursive=True)
            if os.path.isfile(f)]
    said = [f for f in logs if "Source: preemption" in Path(f).read_text(errors="replace")]
    assert said, f"Train's failure policy logged no preemption on the controller's node ({len(logs)} log files)"
    from sweeps.reports import summary
    from sweeps.reports.results import load_records

    (row,) = summary.collect(load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], EPOCHS),
                             rec["metric"], rec["mode"]).rows
    assert (row.preemptions, row.epochs_lost) == (1, 0), story
    m = mlflow_client(parts.mlflow.url)
    (run,) = m.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
    assert run.info.status == "FINISHED" and run.data.tags["retries"] == "0", run.data.tags
    assert (run.data.tags["preemptions"], run.data.tags["epochs_lost"]) == ("1", "0"), run.data.tags
