"""A real multi-node Ray cluster on this machine whose nodes do not have this project, a real S3-compatible server
(moto) and a real ``mlflow server`` whose artifacts live in that S3. Slow tier, marked ``cluster``.

One cluster serves the module (tests/cluster_harness.py): a 0-CPU head, so every trial must run on a worker
node, and worker nodes started in their own mount namespace where the checkout and the editable install are
hidden (``import sweeps`` fails there: asserted). Token authentication is on for every node and client.
Storage is S3, but for a shared folder under /tmp (the shipped-code test) and a folder inside the checkout that
the nodes cannot see (refused as node-local).
The tests run in file order on purpose: the first one starts its sweep on the bare head (autoscaling shape) and
adds the worker node; the last one adds a second node and kills one.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_harness import REPO, Cluster, S3Server, WorkerNode, hidden_checkouts, start_s3, wait_until
from conftest import SweepsEnv, clean_clone, mlflow_client

from sweeps import uris
from sweeps.tracking import server as mlflow_server

pytestmark = [
    pytest.mark.slow, pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None
                       or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0,
                       reason="worker nodes without the project need root and a working `unshare -m`"),
]

NODE_CPUS = 4  # two trials (2 CPUs each) per node
# each trial in its own process on a node without the project (issue 51), with 2 CPUs: two per node
TRIAL = ["+experiment=quickstart", "trainable.num_workers=1", "trainable.resources_per_worker.CPU=2",
         "report.enabled=false",
         "cluster.health_check_interval_s=0.1", "cluster.worker_start_timeout_s=180",
         "cluster.wait_for_resources_s=300"]


@dataclass
class Parts:
    root: Path
    s3: S3Server
    mlflow: mlflow_server.Server
    cluster: Cluster

    def worker(self) -> WorkerNode:
        """The worker node every test shares (started on first use when the first test did not add it)."""
        if not self.cluster.workers:
            self.cluster.start_worker(NODE_CPUS, env=self.s3.env)
        return self.cluster.workers[0]

    def remote(self) -> list[str]:
        return ["cluster=remote", f"cluster.address={self.cluster.address}", f"tracking.uri={self.mlflow.url}"]

    def driver_env(self) -> dict[str, str]:
        """A `sweeps` driver on this machine: the cluster's token (in HOME) and S3's endpoint. No RAY_AUTH_MODE:
        sweeps turns token mode on for itself when it finds a token (docs/cluster.md, the table)."""
        env = {"HOME": str(self.cluster.home), **self.s3.env}
        return env


@contextmanager
def standing(root: Path, dashboard: bool = True, workers: int = 0) -> Iterator[Parts]:
    """S3 (moto), an MLflow server whose artifacts go there (both on loopback), a 0-CPU head (with or without
    the dashboard) and ``workers`` worker nodes of NODE_CPUS; all stopped at the end, this process's env put back."""
    s3 = start_s3(root / "moto.log")
    saved = {k: os.environ.get(k) for k in s3.env}
    os.environ.update(s3.env)  # this process reads S3 too (pyarrow, boto3)
    home = root / "home"
    home.mkdir()
    base = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    cluster = Cluster(root, home, base)
    srv = None
    try:
        # MLflow server on loopback with proxied artifacts in the same S3 (it needs the AWS env and boto3)
        srv = mlflow_server.start(f"sqlite:///{root / 'mlflow.db'}", artifacts_destination=s3.uri("mlflow"),
                                  log_path=root / "mlflow.log", env={**base, "HOME": str(home)})
        cluster.start_head(env=s3.env, dashboard=dashboard)
        for _ in range(workers):
            cluster.start_worker(NODE_CPUS, env=s3.env)
        yield Parts(root, s3, srv, cluster)
    finally:
        cluster.shutdown()
        if srv is not None:
            srv.stop()
        s3.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    with standing(tmp_path_factory.mktemp("cluster")) as p:  # a Ray Job's driver runs on the head: dashboard on
        yield p


# -- helpers -------------------------------------------------------------------------------------------------
def record(env: SweepsEnv | Path) -> dict:
    """The (single) sweep index record under a SWEEPS_HOME; pathlib's glob also sees the store's temp files."""
    home = env.home if isinstance(env, SweepsEnv) else env
    recs = sorted(p for p in (home / "sweeps").glob("[!.]*.json") if not p.name.startswith(".")) \
        if (home / "sweeps").is_dir() else []
    return json.loads(recs[0].read_text()) if recs else {}


def s3_rows(exp_uri: str) -> dict[str, list[dict]]:
    """Each trial's result.json rows, read from the object store."""
    out: dict[str, list[dict]] = {}
    for name in uris.listdir(exp_uri):
        f = uris.join(exp_uri, name, "result.json")
        if name.startswith("run_trial") and uris.is_file(f):
            out[name] = [json.loads(x) for x in uris.read_text(f).splitlines() if x.strip()]
    return out


def snapshot_since(exp_uri: str, since: float) -> bool:
    """Tune's experiment snapshot in the store was written at ``since`` or later."""
    times = [uris.mtime(uris.join(exp_uri, n)) for n in uris.listdir(exp_uri) if n.startswith("experiment_state-")]
    return any(t is not None and t >= since for t in times)


def live_rows(cluster: Cluster, sweep_id: str) -> dict[str, list[dict]]:
    """Rows as the driver writes them (its staging folder on the head's session dir), before they reach S3."""
    out: dict[str, list[dict]] = {}
    pattern = str(cluster.head.temp_dir / "session_*" / "artifacts" / "*" / sweep_id / "driver_artifacts" / "*" /
                  "result.json")
    for f in glob.glob(pattern):
        rows = []
        for line in Path(f).read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a half-written last line
        out[Path(f).parent.name] = rows
    return out


def all_rows(env: SweepsEnv) -> list[dict]:
    rec = record(env)
    return [r for d in rec["experiment_dirs"] for rows in s3_rows(d).values() for r in rows]


def check(proc: subprocess.CompletedProcess[str], what: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{out[-6000:]}"
    return out


def kill_group(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


# -- tests ---------------------------------------------------------------------------------------------------
@pytest.mark.timeout(2400)
def test_s3_sweep_waits_for_a_node_then_runs_report_resume_extend_promote_sync_doctor(
        parts: Parts, tmp_path: Path) -> None:
    """Object storage end to end on a cluster that grows, every trial on a node without this project.

    The sweep starts on a 0-CPU head and waits ("waiting for resources"); a worker node joins; a trial fails
    once and Tune retries it from its S3 checkpoint; the driver is SIGKILLed; resume, extend, report, promote
    (reading the checkpoint from S3), sync and doctor all work from the s3:// location.
    Why its own sweep: the cluster grows under it and its driver is SIGKILLed; every later command shares it."""
    env = SweepsEnv(tmp_path, seed_store=False)
    c, store = parts.cluster, parts.s3.uri("sweeps")
    assert not c.workers, "this test starts on the bare head: run the module in file order"
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sweeps", "run", *TRIAL, *parts.remote(), f"storage.path={store}",
             "sweep.num_samples=2", "scheduler=fifo", "trainable.params.epochs=6", "trainable.params.batch_size=16",
             "+trainable.params.fault=raise_once", "+trainable.params.fault_epoch=2", "failure.worker_max_failures=0",
             "failure.max_failures=1",
             # every checkpoint kept: the SIGKILL below leaves a snapshot in S3 that may name a checkpoint that a
             # smaller window already deleted (docs/cluster.md, "Storage")
             "checkpoint.num_to_keep=8", "+trainable.params.epoch_sleep_s=1"],
            # Tune's snapshot of the experiment reaches the store every 10 s or more (docs/cluster.md); a resume after
            # a SIGKILL restores what the last one names. Seen in CI: none after the retries, so both trials began
            # again from epoch 1. This test's subject is that restore: Tune's own snapshot period (its public
            # TUNE_GLOBAL_CHECKPOINT_S) is shortened, and the kill waits for a snapshot taken after the retries.
            cwd=tmp_path, env={**env.env, **parts.driver_env(), "TUNE_GLOBAL_CHECKPOINT_S": "2"}, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_until(lambda: "waiting for resources: need CPU=2" in log.read_text() or proc.poll() is not None, 240,
                   "the 'waiting for resources' line")
        assert proc.poll() is None, log.read_text()[-4000:]
        assert "cluster has nothing" in log.read_text() or "cluster has" in log.read_text()
        w = parts.worker()  # the autoscaler's node arrives
        assert "No module named 'sweeps'" in w.probe and "exit=1" in w.probe, w.probe

        # both trials past their injected fault (retried from their epoch-1 S3 checkpoint), and a snapshot of Tune's
        # taken since in the store, then the driver dies
        def past_fault() -> dict[str, list[dict]] | None:
            sid = record(env).get("sweep_id")
            rows = live_rows(c, sid) if sid else {}
            done = len(rows) == 2 and all(any(r.get("restored_epoch") for r in t) for t in rows.values())
            if done:
                retried = max(r["timestamp"] for t in rows.values() for r in t if r.get("restored_epoch"))
                done = snapshot_since(f"{store}/{sid}", retried + 2)
            return rows if done or proc.poll() is not None else None

        wait_until(past_fault, 420, "both trials retried after their injected fault", interval=0.5)
        assert proc.poll() is None, log.read_text()[-4000:]
        kill_group(proc)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    rec = record(env)
    sid = rec["sweep_id"]
    assert rec["storage_path"] == store and rec["experiment_dirs"] == [f"{store}/{sid}"]

    out = check(env.run("resume", sid, extra_env=parts.driver_env(), timeout=900), "resume")
    assert re.search(rf"sweep {sid}: finished", out), out[-3000:]
    rec = record(env)
    assert rec["status"] == "finished" and rec["counts"]["total"] == 2 and rec["counts"]["failed"] == 0, out[-8000:]

    out = check(env.run("extend", sid, "--more-trials", "1", extra_env=parts.driver_env(), timeout=900), "extend")
    rec = record(env)
    assert rec["counts"]["total"] == 3 and rec["counts"]["failed"] == 0, out[-3000:]
    assert len(rec["experiment_dirs"]) == 2 and all(d.startswith(store) for d in rec["experiment_dirs"])

    # every trial, retried, resumed or added, ran on the worker node; the retry restored from S3
    per_trial: dict[str, list[dict]] = {}
    for d in rec["experiment_dirs"]:
        per_trial.update(s3_rows(d))
    assert len(per_trial) == 3
    rows = [r for t in per_trial.values() for r in t]
    assert {r["node_id"] for r in rows} == {w.node_id}
    for name, trial in per_trial.items():
        epochs = [r["epoch"] for r in trial]
        assert epochs[-1] == 6 and epochs.count(1) == 1, (name, epochs)
        assert trial[0]["config"].get("lr"), f"{name} ran without its sampled hyperparameters"
        assert any(r.get("restored_epoch", 0) >= 1 for r in trial), f"{name} was never restored from a checkpoint"

    out = check(env.run("report", sid, extra_env=parts.driver_env()), "report")
    assert "3 trial(s)" in out
    out = check(env.run("promote", sid, "--model-name", "cluster-digits", extra_env=parts.driver_env(), timeout=300),
                "promote")
    assert "registered cluster-digits version 1" in out
    out = check(env.run("sync", sid, extra_env=parts.driver_env()), "sync")
    assert "synced:" in out
    out = check(env.run("doctor", "--storage", store, "--tracking-uri", parts.mlflow.url,
                        extra_env=parts.driver_env()), "doctor")
    assert f"{store} writable" in out
    keys = parts.s3.keys("mlflow/")
    assert any(k.endswith("artifacts/model.pt") and "/models/" in k for k in keys), \
        "trial checkpoints logged to MLflow's S3 store, as the trials' models"
    assert not any(k.startswith("sweeps/sweeps/") or "s3:" in k for k in parts.s3.keys())


@pytest.mark.timeout(1500)
def test_pbt_with_more_trials_than_slots_on_nodes_without_the_project(parts: Parts, tmp_path: Path) -> None:
    """Synchronous PBT, 3 trials, room for 2: paused trials must not hold a slot (else: deadlock); exploits
    copy a donor's S3 checkpoint into another trial; everything runs on the worker node. (A shared-filesystem
    ``storage.path``: the shipped-code test below.)"""
    env = SweepsEnv(tmp_path, seed_store=False)
    w = parts.worker()
    out = check(env.run("run", *TRIAL, *parts.remote(), f"storage.path={parts.s3.uri('pbt')}", "scheduler=pbt",
                        "scheduler.synch=true", "scheduler.perturbation_interval=2", "scheduler.quantile_fraction=0.34",
                        "scheduler.hyperparam_mutations={lr: {dist: loguniform, low: 0.001, high: 0.1}}",
                        "sweep.num_samples=3", "sweep.max_concurrent_trials=0", "trainable.params.epochs=3",
                        "checkpoint.num_to_keep=4", extra_env=parts.driver_env(), timeout=1400), "PBT sweep")
    rec = record(env)
    assert rec["counts"]["total"] == 3 and rec["counts"]["failed"] == 0, out[-3000:]
    rows = all_rows(env)
    assert {r["node_id"] for r in rows} == {w.node_id}
    exploits = [r for r in rows if r.get("restored_from") and r["restored_from"] != r["trial_id"]]
    assert exploits, "PBT copied no donor checkpoint into another trial"


@pytest.mark.timeout(900)
def test_a_node_local_storage_path_is_refused_before_any_trial(parts: Parts, tmp_path: Path) -> None:
    """A POSIX ``storage.path`` that the nodes cannot see is refused before launch: a folder inside the checkout
    (which every node's mount namespace hides), existing and writable on the driver's side, so only the nodes'
    visibility check can refuse it. Exit 2, and the message names ``storage.path``, the path, "node-local" and
    the blind nodes (the worker node and the head); nothing ran: no sweep record, no MLflow run (parent or
    child), nothing left in the folder (no experiment or trial folder, the check's marker removed).
    Shares the module's cluster and its worker node; runs no trial."""
    env = SweepsEnv(tmp_path, seed_store=False)
    c = parts.cluster
    w = parts.worker()  # two nodes at least: a single-node cluster skips the check
    m = mlflow_client(parts.mlflow.url)

    def runs() -> set[str]:
        ids = [e.experiment_id for e in m.search_experiments()]
        return {r.info.run_id for r in m.search_runs(ids, max_results=1000)} if ids else set()

    before = runs()
    hidden = REPO / ".pytest_cache"  # inside the checkout (gitignored): hidden on every node
    hidden.mkdir(exist_ok=True)
    local = Path(tempfile.mkdtemp(prefix="node-local-", dir=hidden))
    try:
        proc = env.run("run", *TRIAL, *parts.remote(), f"storage.path={local}", "scheduler=fifo",
                       "sweep.num_samples=1", "trainable.params.epochs=1", extra_env=parts.driver_env(), timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, f"exited {proc.returncode}\n{out[-4000:]}"
        said = re.search(rf"storage\.path: {re.escape(str(local))} is node-local: node\(s\) ([0-9a-f, ]+) cannot see "
                         r"it", out)
        assert said, out[-4000:]
        assert {w.node_id[:8], c.head.node_id[:8]} <= set(said.group(1).split(", ")), said.group(0)
        assert record(env) == {}, "no sweep record: refused before the sweep started"
        assert runs() == before, "no MLflow run: refused before the parent run and any trial's run"
        assert local.is_dir() and not list(local.iterdir()), sorted(p.name for p in local.iterdir())
    finally:
        shutil.rmtree(local, ignore_errors=True)


@pytest.mark.timeout(1500)
def test_ray_job_submit_with_token_auth(parts: Parts, tmp_path: Path) -> None:
    """`ray job submit --working-dir <checkout>` runs the sweep's driver on the head; the upload leaves out the
    virtualenv and local state (.gitignore + .rayignore); a client without the token is refused. While the job
    runs, a shell that has only the sweep's storage URI (and S3's credentials: no record, no Ray) reads its
    status and stops it; the job's driver ends the sweep as after SIGTERM (interrupted, exit 130).
    Shares its sweep: the verbs on the embedded Ray are in tests/test_operate_slow.py."""
    c = parts.cluster
    w = parts.worker()
    home = tmp_path / "home"  # SWEEPS_HOME of the job's driver: on this machine's disk, read by the test
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts"]
    refused = subprocess.run([*ray_cli, "job", "list", "--address", c.dashboard], capture_output=True, text=True,
                             env={**c.base_env, "HOME": str(tmp_path)}, timeout=120)
    assert refused.returncode != 0 and re.search(r"401|Unauthorized|authentication", refused.stdout + refused.stderr,
                                                 re.IGNORECASE), refused.stdout + refused.stderr
    runtime_env = {"env_vars": {"SWEEPS_HOME": str(home), "SWEEPS_CONF_DIR": "conf"}}
    job = subprocess.Popen(
        [*ray_cli, "job", "submit", "--address", c.dashboard, "--working-dir", str(REPO), "--runtime-env-json",
         json.dumps(runtime_env), "--", "python", "-m", "sweeps", "run", *TRIAL, "cluster=remote",
         "cluster.address=auto", f"tracking.uri={parts.mlflow.url}", f"storage.path={parts.s3.uri('jobs')}",
         "sweep.num_samples=1", "trainable.params.epochs=12", "+trainable.params.epoch_sleep_s=1.0",
         "scheduler=fifo"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=c.client_env(), cwd=tmp_path)
    try:
        uri = _operate_by_uri(parts, tmp_path / "elsewhere")
        out, _ = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0 and re.search(r"sweep \S+: interrupted", out), out[-3000:]  # the driver exited 130
    rec = record(home)
    assert rec["status"] == "interrupted" and uri == rec["experiment_dirs"][0], (rec["status"], uri)
    assert rec["lease_expires"] is None, "the driver closed its record"
    # what the job uploaded, as the head unpacked it: the code and configs, not .venv, .git or local state
    unpacked = [p for p in glob.glob(str(c.head.temp_dir / "session_*" / "runtime_resources" / "working_dir_files"
                                         / "*" / "pyproject.toml"))]  # beside each: its .zip.lock
    pkg = os.path.dirname(max(unpacked, key=os.path.getmtime))  # this job's (an earlier job's may be there)
    files = [Path(d, f) for d, _, fs in os.walk(pkg) for f in fs]
    names = {p.relative_to(pkg).parts[0] for p in files}
    assert {"sweeps", "trainables", "conf", "search_spaces"} <= names, names
    assert not names & {".venv", ".git", ".sweeps", "tests", "benchmarks", "reports", "build"}, names
    assert sum(p.stat().st_size for p in files) < 2_000_000, "the working dir upload is small"
    rows = [r for d in rec["experiment_dirs"] for t in s3_rows(d).values() for r in t]
    assert rows and {r["node_id"] for r in rows} == {w.node_id}


def _operate_by_uri(parts: Parts, folder: Path) -> str:
    """From a shell with the storage URI only: wait until the job's sweep runs a trial, `status` it, `stop` it.
    Returns the sweep's URI."""
    folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWEEPS_", "RAY_"))}
    env.update(parts.s3.env, HOME=str(folder), SWEEPS_HOME=str(folder / ".sweeps"))

    def sweeps(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=120)

    def live() -> str | None:
        found = [k for k in parts.s3.keys("jobs/") if k.endswith("/sweeps-live/status.json")]
        return parts.s3.uri(found[0].split("/sweeps-live/")[0]) if found else None

    uri = wait_until(live, 600, "the job's sweep writing its live record")

    def running() -> dict | None:
        got = sweeps("status", uri, "--json")
        state = json.loads(got.stdout) if got.returncode == 0 else {}
        return state if state.get("state") == "running" and state["trials"]["running"] >= 1 else None

    state = wait_until(running, 600, "the job's sweep running a trial, as `sweeps status URI` sees it")
    assert state["driver"]["launched_by"] == "ray job", state["driver"]
    stop = sweeps("stop", uri)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not list(folder.glob(".sweeps/sweeps/*.json")), "the operating shell keeps no record of its own"
    return uri


USER_LOOP = '''"""A user's own single-file module (no package around it): the loop."""


def train_loop(config):
    from trainables.digits import load_data, preprocessing
    from trainables.loop import ClassificationTask, fit
    from usernsp.models import build_model  # the namespace package's folder a
    from usernsp.tags import PORTION  # its folder b

    assert PORTION == "b"
    fit(config, load_data, build_model, ClassificationTask(), preprocessing=preprocessing)
'''


@pytest.mark.timeout(1500)
def test_a_single_file_loop_and_a_namespace_package_ship_to_the_worker_node(parts: Parts, tmp_path: Path) -> None:
    """Code outside this repo that is not a regular package reaches a node that never had it: the loop lives in a
    single-file module, its model builder in a namespace package (no __init__.py) split over two folders. They
    are on the driver's PYTHONPATH only, which Ray passes to no node, so the trial runs only if all three were
    shipped. The trainable is made the way a user adopts a loop, ``sweeps new trainable NAME --from
    usermod:train_loop`` in a clean clone, so the files the scaffold wrote (its config, ``trainables/NAME.py``)
    reach the node too. The driver runs as on a Ray version sweeps' private levers were not checked against
    (``SWEEPS_TEST_RAY_VERSION``): Ray's public path on a cluster (Train's own trainer; the token mode exported
    as ``RAY_AUTH_MODE=token``, as the driver then asks, since it no longer refreshes Ray's config itself).
    Its storage is a shared-filesystem ``storage.path`` (a folder under /tmp every node sees), as a user gives
    it with ``cluster=remote``. Shares its sweep: the scaffold's own checks are in tests/test_new_trainable.py,
    the public path's on one machine in tests/test_warm_slow.py."""
    env = SweepsEnv(tmp_path, seed_store=False)
    w = parts.worker()
    project = clean_clone(tmp_path / "project")
    a, b = tmp_path / "user_a", tmp_path / "user_b"
    (a / "usernsp").mkdir(parents=True)
    (b / "usernsp").mkdir(parents=True)
    (a / "usermod.py").write_text(USER_LOOP)
    (a / "usernsp" / "models.py").write_text(
        "def build_model(config):\n    from trainables.digits import build_model\n\n    return build_model(config)\n")
    (b / "usernsp" / "tags.py").write_text("PORTION = 'b'\n")
    assert not (project / "usermod.py").exists() and not (project / "usernsp").exists()
    user = {"PYTHONPATH": os.pathsep.join(str(p) for p in (project, a, b)),
            # the allowlist is the operator's: an override may not widen it (docs/security.md)
            "SWEEPS_ALLOWED_TARGETS": "usermod,usernsp", "SWEEPS_CONF_DIR": str(project / "conf"),
            "SWEEPS_TEST_RAY_VERSION": "2.61.0", "RAY_AUTH_MODE": "token"}
    check(env.run("new", "trainable", "shipped", "--from", "usermod:train_loop", cwd=project,
                  extra_env={**parts.driver_env(), **user}, timeout=300), "new trainable --from")
    shared = Path(tempfile.mkdtemp(prefix="sweeps-shared-", dir="/tmp"))  # every node sees /tmp: a shared path
    assert not any(shared.is_relative_to(d) for d in hidden_checkouts())
    try:
        out = check(env.run("run", "+experiment=shipped", *TRIAL[1:], *parts.remote(), f"storage.path={shared}",
                            "scheduler=fifo", "sweep.num_samples=1", "trainable.params.epochs=2",
                            "trainable.builder=usernsp.models.build_model", cwd=project,
                            extra_env={**parts.driver_env(), **user}, timeout=900), "sweep of a single-file loop")
        rec = record(env)
        assert rec["counts"]["completed"] == 1 and rec["counts"]["failed"] == 0, out[-6000:]
        # the shared-filesystem storage.path: the check that every node sees it let it through, and the trial on
        # the worker node wrote its results and checkpoints straight into it
        assert "node-local" not in out and not list(shared.glob(".sweeps-shared-*")), out[-3000:]
        sid = rec["sweep_id"]
        assert rec["storage_path"] == str(shared) and rec["experiment_dirs"] == [str(shared / sid)], rec
        (trial,) = [p for p in (shared / sid).iterdir() if p.name.startswith("run_trial")]
        assert (trial / "result.json").is_file() and any(c.iterdir() for c in trial.glob("checkpoint_*")), trial
        assert "lean off (lean_trainer: ray 2.61.0 is not a version it was checked against" in out, "the public path"
        assert rec["config"]["trainable"]["loop"] == "usermod.train_loop"
        assert rec["config"]["trainable"]["load_model"] == "trainables.shipped.load_model", "the scaffold's trainable"
        rows = all_rows(env)  # read from the shared folder: before it is removed
        assert [r["epoch"] for r in rows] == [1, 2], rows
        assert {r["node_id"] for r in rows} == {w.node_id}, "the trial ran on the worker node"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.timeout(1500)
def test_node_loss_restores_the_trial_that_ran_there(parts: Parts, tmp_path: Path) -> None:
    """Two worker nodes; the one a trial runs on is SIGKILLed mid-trial. That trial continues from a checkpoint
    taken before the kill (in S3: the node's disk is gone), its epochs never restart, and every trial finishes.
    Why its own sweep: a node is SIGKILLed under it."""
    env = SweepsEnv(tmp_path, seed_store=False)
    c = parts.cluster
    parts.worker()
    c.start_worker(NODE_CPUS, env=parts.s3.env)
    ids = {w.node_id: w for w in c.workers}
    proc = env.popen("run", *TRIAL, *parts.remote(), f"storage.path={parts.s3.uri('loss')}", "scheduler=fifo",
                     "sweep.num_samples=2", "trainable.params.epochs=8", "trainable.params.batch_size=8",
                     "+trainable.params.epoch_sleep_s=2.0",  # >= 12 s of epochs left once epoch 2 is seen
                     "failure.worker_max_failures=2", "failure.max_failures=2", extra_env=parts.driver_env())
    try:
        def training() -> tuple[str, str, int] | None:
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read()[-4000:] if proc.stdout else "driver exited")
            sid = record(env).get("sweep_id")
            for name, rows in (live_rows(c, sid) if sid else {}).items():
                if rows and rows[-1]["epoch"] >= 2 and rows[-1]["node_id"] in ids:
                    return name, rows[-1]["node_id"], rows[-1]["epoch"]
            return None

        victim_trial, victim_node, _ = wait_until(training, 420, "a trial past epoch 2", interval=0.3)
        ids[victim_node].kill()
        t_kill = time.time()
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, out[-6000:]
    rec = record(env)
    assert rec["counts"]["total"] == 2 and rec["counts"]["failed"] == 0 and rec["counts"]["completed"] == 2, out[-3000:]
    per_trial = s3_rows(rec["experiment_dirs"][0])
    assert len(per_trial) == 2
    trial = per_trial[victim_trial]
    story = [(r["epoch"], r["node_id"][:8], r.get("restored_epoch"), round(r["timestamp"] - t_kill, 1)) for r in trial]
    # Rows are stamped when the trial's driver re-reports them, which may lag the training: what ran after the
    # loss is what follows the victim node's last row, trained elsewhere.
    last_on_victim = max(i for i, r in enumerate(trial) if r["node_id"] == victim_node)
    after = trial[last_on_victim + 1:]
    assert after, f"{victim_trial} never ran again after its node was killed: {story}"
    assert all(r["node_id"] != victim_node for r in after), story
    restored = after[0].get("restored_epoch", 0)
    assert 1 <= restored <= trial[last_on_victim]["epoch"], f"not restored from a pre-kill checkpoint: {story}"
    assert after[0]["epoch"] == restored + 1, f"epochs do not continue from the checkpoint: {story}"
    epochs = [r["epoch"] for r in trial]
    assert epochs.count(1) == 1 and epochs[-1] == 8, story
    # MLflow tells the same story: one run per trial (a restart is not a new trial), each step Tune observed logged
    # once. A step can be observed twice: when the node dies just as an epoch is reported, Tune may see that
    # epoch's result but restore from the checkpoint before it (the later one was never registered), and the
    # epoch runs again; both observations are the trial's history (the rows hold both too), none is invented.
    m = mlflow_client(parts.mlflow.url)
    children = m.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
    assert len(children) == 2 and len({r.data.tags["sweeps.trial_id"] for r in children}) == 2
    run = next(r for r in children if r.data.tags["sweeps.trial_id"] == trial[0]["trial_id"])
    steps = [h.step for h in m.get_metric_history(run.info.run_id, "val/acc")]
    observed = sorted(r["training_iteration"] for r in trial)
    assert sorted(steps) == observed and sorted(set(steps)) == list(range(1, 9)), (steps, observed, story)
    assert run.info.status == "FINISHED", run.info.status
