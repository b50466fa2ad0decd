"""A cluster whose head runs without Ray's dashboard (no State API), two worker nodes without this project, S3 and
an MLflow server: placement groups freed, a stall explained and ended, a drained node survived. Slow tier, marked
``cluster``.

Why a module of its own: the head's dashboard is started or not with the head, and tests/test_cluster_slow.py
needs it (its Ray Job test submits through the job server). The tests run in file order.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import Cluster, wait_until
from conftest import SweepsEnv, mlflow_client
from test_cluster_slow import NODE_CPUS, TRIAL, Parts, check, kill_group, live_rows, record, s3_rows, standing

pytestmark = [
    pytest.mark.slow, pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None
                       or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0,
                       reason="worker nodes without the project need root and a working `unshare -m`"),
]

PGS = """
from ray._private import state
pgs = [e for e in ray.util.placement_group_table().values() if e["state"] != "REMOVED"]
actors = state.actors(actor_state_name="ALIVE").values()
out = {"named": [e["name"] for e in pgs if (e.get("name") or "").startswith("sweeps:") and e["state"] == "CREATED"],
       "cleaners": sum(1 for a in actors if a["ActorClassName"] == "PlacementGroupCleaner")}
"""


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    with standing(tmp_path_factory.mktemp("nodash"), dashboard=False, workers=2) as p:
        yield p


class GroupSampler:
    """The cluster's live `sweeps:` worker groups (each named after its trial), every few seconds (GCS)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.samples = cluster, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append({**self.cluster.gcs(PGS), "t": time.time()})
            except (AssertionError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(1.0)  # a sample a second, over the harness's one long-lived GCS client

    def __enter__(self) -> GroupSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def outlived_s(self, ended: dict[str, float]) -> dict[str, float]:
        """Per ended trial (its id -> when the sweep saw it end), how long its worker group outlived it: from the
        end to the first later sample without a group named after the trial (samples are about a second apart, so
        the figure includes the gap between two samples)."""
        out = {}
        for trial, t_end in ended.items():
            gone = next((s["t"] for s in self.samples if s["t"] >= t_end
                         and not any(f":{trial}:" in name for name in s["named"])), None)
            out[trial] = (gone if gone is not None else float("inf")) - t_end
        return out


def trial_ends(home: Path) -> dict[str, float]:
    """Each trial's end as the sweep's driver saw it (its event log: one JSON line per result and end)."""
    ends = {}
    for f in (home / "logs").glob("*.log"):
        for line in f.read_text().splitlines():
            if line.startswith("{") and '"status"' in line:
                row = json.loads(line)
                ends[row["trial"]] = row["time"]
    return ends


GRID = ["sweep.num_samples=3", "search_space.lr={dist: grid, values: [0.00001, 0.05]}", "scheduler=asha",
        "scheduler.grace_period=1", "scheduler.reduction_factor=2", "scheduler.max_t=4", "trainable.params.epochs=4",
        "sweep.max_concurrent_trials=4",
        # the subject is the Train worker groups' placement groups: a worker group of one (1 CPU), driver 1 CPU
        "trainable.in_process=false", "trainable.resources_per_worker.CPU=1"]


@pytest.mark.timeout(1500)
def test_asha_without_the_dashboard_frees_every_stopped_trials_group(parts: Parts, tmp_path: Path) -> None:
    """Six trials, the tiny-lr ones stopped early by ASHA: no stopped trial's worker group outlives it by more
    than a few seconds (its end in the sweep's event log vs its named group in the GCS), no per-run
    PlacementGroupCleaner is started, and the sweep completes. Why its own sweep: the head must run without the
    dashboard, which tests/test_cluster_slow.py's Ray Job test needs."""
    env = SweepsEnv(tmp_path, seed_store=False)
    with GroupSampler(parts.cluster) as sampler:
        out = check(env.run("run", *TRIAL, *parts.remote(), f"storage.path={parts.s3.uri('nodash')}", *GRID,
                            extra_env=parts.driver_env(), timeout=1200), "ASHA sweep")
        end = time.time()
        wait_until(lambda: any(s["t"] > end for s in sampler.samples), 120, "a sample after the sweep")
    rec = record(env)
    assert rec["status"] == "finished" and rec["counts"]["total"] == 6 and rec["counts"]["failed"] == 0, out[-3000:]
    assert rec["counts"]["early_stopped"] >= 1, rec["counts"]
    assert len(sampler.samples) >= 5, sampler.samples
    # freed within two reaper scans (2 x EVERY_S) plus the gap between two GCS samples on a loaded machine; left
    # to Ray, a stopped trial's group lives until the sweep ends
    ends = trial_ends(env.home)
    assert len(ends) == 6, ends
    outlived = sampler.outlived_s(ends)
    assert max(outlived.values()) <= 15, (outlived, [(s["t"], s["named"]) for s in sampler.samples])
    assert not any(s["cleaners"] for s in sampler.samples), "a per-run PlacementGroupCleaner was started"
    assert not [s for s in sampler.samples if s["t"] > end][-1]["named"], "the sweep's groups outlived it"


HOG = """
import sys, time, ray
from ray.util.placement_group import placement_group
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
free = sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])
pg = placement_group([{"CPU": 1}] * int(free), strategy="SPREAD")
ray.get(pg.ready(), timeout=120)
print("HELD", int(free), flush=True)
time.sleep(3600)
"""


@pytest.mark.timeout(900)
def test_another_job_holding_every_cpu_stalls_the_sweep_and_the_watchdog_ends_it(parts: Parts, tmp_path: Path) -> None:
    """Another job's placement group holds every worker CPU (a forgotten notebook, a dead driver's job): no
    trial can start. The stall watchdog says, without the State API, what waits and what holds the CPUs, and
    after ``sweep.stall_timeout_s`` ends the sweep with exit 1, every run final and the record resumable.
    Why its own sweep: it must stall. (A leaked worker group is the reaper's case: tests/test_warm.py shows Ray
    keeping a dead controller's group and the reaper freeing it.)"""
    env = SweepsEnv(tmp_path, seed_store=False)
    c = parts.cluster
    hog = subprocess.Popen([os.sys.executable, "-c", HOG, c.address], env=c.client_env(), cwd=c.tmp,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().startswith("HELD"), "the other job holds nothing"
        proc = env.run("run", *TRIAL, *parts.remote(), f"storage.path={parts.s3.uri('stall')}",
                       "sweep.num_samples=2", "sweep.stall_timeout_s=25", extra_env=parts.driver_env(), timeout=600)
    finally:
        kill_group(hog)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert re.search(r"stalled\s*: no trial started or reported for \d+ s", out), out[-4000:]
    assert "trial(s) wait to start" in out and "other placement group(s)" in out and "free: node" in out, \
        out[-4000:]
    rec = record(env)
    assert rec["status"] == "interrupted" and rec["stop_reason"] == "stalled", rec
    c = mlflow_client(parts.mlflow.url)
    runs = c.search_runs([rec["mlflow_experiment_id"]], f"tags.`sweeps.sweep_id` = '{rec['sweep_id']}'")
    assert runs and {r.info.status for r in runs} <= {"FINISHED", "FAILED", "KILLED"}, \
        [(r.info.run_name, r.info.status) for r in runs]
    parent = c.get_run(rec["parent_run_id"])
    assert parent.info.status == "KILLED" and parent.data.tags["error"].startswith("stalled:")
    assert re.search(rf"sweeps resume {rec['sweep_id']}", out)


# 3 s epochs: 24 s of them left after epoch 2, when the drain starts (time for a slow `ray drain-node`)
DRAIN_EPOCHS = 10


@pytest.mark.timeout(1500)
def test_a_drained_node_hands_its_trial_to_the_other_node_as_a_retry(parts: Parts, tmp_path: Path) -> None:
    """``ray drain-node`` (the autoscaler's path for spot and scale-down) with a deadline, then the node goes: the
    trial that ran there continues from its latest checkpoint on the other node; none is lost or counted
    twice; its MLflow run (one per trial) says it was retried. Why its own sweep: a node is taken away under it."""
    env = SweepsEnv(tmp_path, seed_store=False)
    c = parts.cluster
    if len([w for w in c.workers if w.alive()]) < 2:
        c.start_worker(NODE_CPUS, env=parts.s3.env)
    ids = {w.node_id: w for w in c.workers if w.alive()}
    proc = env.popen("run", *TRIAL, *parts.remote(), f"storage.path={parts.s3.uri('drain')}", "scheduler=fifo",
                     "sweep.num_samples=2", f"trainable.params.epochs={DRAIN_EPOCHS}",
                     "+trainable.params.epoch_sleep_s=3.0", "failure.worker_max_failures=2", "failure.max_failures=2",
                     extra_env=parts.driver_env())
    try:
        def training() -> tuple[str, str] | None:
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read()[-4000:] if proc.stdout else "driver exited")
            sid = record(env).get("sweep_id")
            for name, rows in (live_rows(c, sid) if sid else {}).items():
                if rows and rows[-1]["epoch"] >= 2 and rows[-1]["node_id"] in ids:
                    return name, rows[-1]["node_id"]
            return None

        victim_trial, victim_node = wait_until(training, 420, "a trial past epoch 2", interval=0.3)
        drain = subprocess.run(
            [str(Path(os.sys.executable).parent / "ray"), "drain-node", "--address", c.address, "--node-id",
             victim_node, "--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot reclaim",
             "--deadline-remaining-seconds", "10"], env=c.client_env(), capture_output=True, text=True, timeout=120)
        assert drain.returncode == 0, drain.stdout + drain.stderr
        # the deadline (24 s of epochs were left at epoch 2, time for a slow `ray drain-node`): then the node goes,
        # as the autoscaler's would
        time.sleep(10)
        ids[victim_node].kill()
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, out[-6000:]
    rec = record(env)
    assert rec["counts"]["total"] == 2 and rec["counts"]["completed"] == 2 and rec["counts"]["failed"] == 0, out[-3000:]
    trial = s3_rows(rec["experiment_dirs"][0])[victim_trial]
    story = [(r["epoch"], r["node_id"][:8], r.get("restored_epoch")) for r in trial]
    last_on_victim = max(i for i, r in enumerate(trial) if r["node_id"] == victim_node)
    after = trial[last_on_victim + 1:]
    assert after and all(r["node_id"] != victim_node for r in after), story
    assert after[0]["epoch"] == after[0].get("restored_epoch", 0) + 1 >= 2, f"not from a checkpoint: {story}"
    epochs = [r["epoch"] for r in trial]
    assert epochs.count(1) == 1 and epochs[-1] == DRAIN_EPOCHS, story
    m = mlflow_client(parts.mlflow.url)
    children = m.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
    by_trial = {r.data.tags["sweeps.trial_id"]: r for r in children}
    assert len(children) == 2 and len(by_trial) == 2, "one run per trial: the retry is not a new trial"
    run = by_trial[trial[0]["trial_id"]]
    assert run.info.status == "FINISHED"
    # Tune retried the trial (its driver was on the node) or Train restarted its workers (only they were): either
    # way the run's history has each epoch once, and a Tune retry is counted on the run
    steps = [h.step for h in m.get_metric_history(run.info.run_id, "val/acc")]
    assert sorted(steps) == list(range(1, DRAIN_EPOCHS + 1)), (steps, story)
    from sweeps.reports.results import load_records

    (tuned,) = [t for t in load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], DRAIN_EPOCHS)
                if t.trial_id == trial[0]["trial_id"]]
    assert run.data.tags["retries"] == str(tuned.num_failures), (run.data.tags, tuned.num_failures, story)
