"""Shared fixtures. Every test writes under tmp_path; Ray gets a short private temp dir and HOME.

``sweeps_env`` isolates a test: $SWEEPS_HOME (MLflow store, Ray results, sweep index), the cwd (reports/),
Ray's temp dir and auth token. ``run_cli`` runs ``python -m sweeps`` as a real subprocess in that env.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

# Small, fast settings for real sweeps on a 2-core box.
FAST = [
    "trainable.params.epochs=3",
    "cluster.health_check_interval_s=0.1",
    "cluster.worker_start_timeout_s=60",
]


# Epochs of a second each that leave the CPUs free (the bundled loop's test knob): a test that must act mid-trial
# (a signal, a killed worker) has seconds to do it; the quickstart's net runs 10 epochs between two polls.
SLOW_EPOCHS = ["+trainable.params.epoch_sleep_s=1.0"]


FAST_TIMEOUT_S = 120  # a hang in the fast tier fails that test within two minutes


# The slow tier's longest files, longest first (minutes in `--durations`, 2 cores): scripts/test.sh hands files to
# its two processes in collection order (--no-loadscope-reorder), so the longest start first and the short ones
# fill in at the end, instead of a 15-minute file starting last while the other process sits idle.
DURATIONS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "test_durations.txt"


def recorded_seconds(durations: Path = DURATIONS) -> dict[str, float]:
    """Each test's summed setup, call and teardown seconds in the last recorded CI run (``--durations=0`` lines of
    benchmarks/results/test_durations.txt), by ``FILE::FUNCTION`` (a parametrised test's cases summed)."""
    per_test: dict[str, float] = {}
    text = durations.read_text() if durations.is_file() else ""
    for m in re.finditer(r"^\s*([\d.]+)s\s+(?:call|setup|teardown)\s+tests/([^:\s]+::[^\[\s]+)", text, re.M):
        per_test[m[2]] = per_test.get(m[2], 0.0) + float(m[1])
    return per_test


def longest_first(durations: Path = DURATIONS) -> tuple[str, ...]:
    """Test files by their summed time in the last recorded CI run, longest first; a file not recorded there runs
    after them."""
    per_file: dict[str, float] = {}
    for test, seconds in recorded_seconds(durations).items():
        name = test.split("::")[0]
        per_file[name] = per_file.get(name, 0.0) + seconds
    return tuple(sorted(per_file, key=lambda name: -per_file[name]))


LONGEST_FIRST = longest_first()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fast tests get a short time limit of their own (slow ones keep the 900 s of pyproject.toml); the
    longest files run first (``LONGEST_FIRST``), the order within a file kept."""
    for item in items:
        if item.get_closest_marker("slow") is None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(FAST_TIMEOUT_S))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order otherwise kept



# In CI (.ci/run sets SWEEPS_CI=1) every tool a test needs is installed, so a skip there means a test that proved
# nothing while the run reads green. Only a GPU test on a machine without CUDA may skip; any other skip fails.
CI_ALLOWED_SKIP = "no CUDA"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``SWEEPS_CI=1`` a skip whose reason is not ``CI_ALLOWED_SKIP``'s is reported as a failure that
    names the reason (an xfail is not a skip)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("SWEEPS_CI") != "1" or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if CI_ALLOWED_SKIP in reason:
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped in CI (SWEEPS_CI=1), where only a '{CI_ALLOWED_SKIP}' skip is allowed: {reason}\n"
                       "install what the test needs in .ci/run, or remove the test")


@pytest.fixture(autouse=True)
def _levers_decided_afresh() -> Iterator[None]:
    """A lever is decided once per process (sweeps.execution.levers.core); a test that changes the environment
    (a pretended Ray version, SWEEPS_LEVERS_OFF) gets a fresh decision, and leaves none behind."""
    from sweeps.execution.levers import core

    core.forget()
    yield
    core.forget()


def _template_store() -> Path:
    """An empty, migrated MLflow SQLite store, made once per machine and MLflow version.

    A fresh store costs several CPU-seconds of schema migrations; copying a template saves that per test.
    """
    import filelock
    import mlflow

    path = Path(tempfile.gettempdir()) / f"sweeps-test-mlflow-{mlflow.__version__}.db"
    with filelock.FileLock(str(path) + ".lock"):
        if not path.is_file():
            tmp = path.with_suffix(".tmp.db")
            tmp.unlink(missing_ok=True)
            subprocess.run([sys.executable, "-c", "import sys; from mlflow.tracking import MlflowClient; "
                            "MlflowClient(f'sqlite:///{sys.argv[1]}').search_experiments()", str(tmp)],
                           check=True, capture_output=True)
            tmp.replace(path)
    return path


class SweepsEnv:
    def __init__(self, root: Path, seed_store: bool = True) -> None:
        self.root = root
        self.home = root / "home"
        if seed_store:
            self.home.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_template_store(), self.home / "mlflow.db")
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # unix sockets need short paths
        self.user_home = root / "user"
        self.user_home.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "SWEEPS_HOME": str(self.home),
            "SWEEPS_CONF_DIR": str(REPO / "conf"),
            "RAY_TMPDIR": str(self.ray_tmp),
            "HOME": str(self.user_home),  # Ray writes its auth token under ~/.ray: keep it in the test
            "PYTHONUNBUFFERED": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            # everything on the terminal, as before the console log (sweeps.cli.terminal): tests read Ray's and
            # the levers' lines from the CLI's output; tests/test_installed_slow.py checks the quiet terminal
            "SWEEPS_CONSOLE": "terminal",
        }

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.home / 'mlflow.db'}"

    def run(self, *args: str, timeout: float = 600, check: bool = False,
            extra_env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "sweeps", *args], cwd=cwd or self.root, env={**self.env, **(extra_env or {})},
            capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"sweeps {' '.join(args)} exited {proc.returncode}\n"
                                 f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
        return proc

    def popen(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "sweeps", *args], cwd=self.root, env={**self.env, **(extra_env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )

    def kill_ray(self) -> None:
        """SIGKILL every process of this test's Ray instance (their command lines name its temp dir)."""
        subprocess.run(["pkill", "-9", "-f", str(self.ray_tmp)], check=False)

    def cleanup(self) -> None:
        self.kill_ray()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


@pytest.fixture
def sweeps_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SweepsEnv]:
    env = SweepsEnv(tmp_path, seed_store=False)
    for key in ("SWEEPS_HOME", "SWEEPS_CONF_DIR", "RAY_TMPDIR", "HOME"):
        monkeypatch.setenv(key, env.env[key])
    monkeypatch.chdir(tmp_path)
    yield env
    env.cleanup()


def module_env(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[SweepsEnv]:
    """The body of a module-scoped fixture's environment (a module's shared sweeps): a fresh :class:`SweepsEnv`
    under a folder named ``name``, its Ray cleaned up after the module."""
    env = SweepsEnv(tmp_path_factory.mktemp(name))
    yield env
    env.cleanup()


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Any]:
    """A :class:`harness.Sweep` in a fresh :class:`SweepsEnv` under the test's folder, its Ray cleaned up after."""
    from harness import Sweep

    env = SweepsEnv(tmp_path)
    yield Sweep(env)
    env.cleanup()


@pytest.fixture(scope="session")
def _local_ray_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One HOME (Ray's auth token) for every in-process Ray of this test process: Ray keeps the token it read
    in the process, and a later ``ray.init`` under another HOME fails to start its GCS."""
    return tmp_path_factory.mktemp("local-ray-home")


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory, _local_ray_home: Path) -> Iterator[Path]:
    """A small real Ray in this process (2 CPUs, no dashboard) for the tests of a module that drive Tune
    directly (function trainables, no Train); its temp dir and auth token stay in the test. Yields a folder
    for Tune's storage."""
    import ray

    root = tmp_path_factory.mktemp("local-ray")
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # unix sockets need short paths
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", ray_tmp)
        mp.setenv("HOME", str(_local_ray_home))  # Ray writes its auth token under ~/.ray
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield root
        finally:
            ray.shutdown()
            shutil.rmtree(ray_tmp, ignore_errors=True)


def clean_clone(dest: Path) -> Path:
    """The checkout's tracked (and new, not ignored) files: what a clean clone holds."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for rel in listed:
        src, dst = REPO / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return dest


def trial_dirs(experiment_dir: str | Path) -> list[Path]:
    """The trial folders of a Tune experiment folder: every folder but sweeps' own (``sweeps-good/``, the recovery
    copies; ``sweeps-live/``, the live record)."""
    exp = Path(experiment_dir)
    return sorted(d for d in exp.iterdir() if d.is_dir() and not d.name.startswith("sweeps-")) if exp.is_dir() else []


def wait_for(predicate, timeout: float, interval: float = 1.0, what: str = "condition"):  # noqa: ANN001, ANN201
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def dead_holder() -> Any:
    """A :class:`sweeps.lease.Holder` of a process of this pid namespace that has exited (its proc recorded)."""
    from sweeps import lease

    proc = subprocess.Popen(["sleep", "60"])
    holder = lease.Holder(lease.host(), proc.pid, "dead" + "0" * 28, lease.proc_of(proc.pid))
    proc.kill()
    proc.wait()
    assert holder.proc, "this machine's /proc cannot vouch for its pids"
    return holder


def mlflow_client(uri: str):  # noqa: ANN201 - test helper
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


# -- one lean ``mlflow server`` and one tiny sweep logged to it over HTTP, shared by the session ----------
SERVED_EPOCHS = 2
SERVED_TRIALS = 2
SERVED_TINY = [
    "+experiment=quickstart", f"sweep.num_samples={SERVED_TRIALS}", f"trainable.params.epochs={SERVED_EPOCHS}",
    f"scheduler.max_t={SERVED_EPOCHS}", "scheduler.grace_period=1",
    "cluster.health_check_interval_s=0.1", "cluster.worker_start_timeout_s=60",
    "trainable.num_workers=1",  # in the trial's own process: the server is the promise, not workers
]


@dataclass
class ServedSweep:
    env: SweepsEnv
    server: object  # sweeps.mlflow_server.Server
    url: str
    artifacts: Path
    sweep_id: str
    git_head: str
    stdout: str


def git_repo(root: Path) -> str:
    """Make ``root`` a git repo with one commit, so a sweep's git_commit tag has a known right answer."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    (root / "README").write_text("test project\n")
    for cmd in (["init", "-q"], ["add", "README"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *cmd], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="session")
def served_sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedSweep]:
    """A real ``mlflow server`` (SQLite + proxied artifacts) and one tiny sweep logged to it over HTTP.

    The tracking-server assertions and the browser checks read the same runs: one sweep, not two.
    """
    from sweeps.tracking import server as mlflow_server

    root = tmp_path_factory.mktemp("served")
    env = SweepsEnv(root)
    head = git_repo(root)
    artifacts = root / "server" / "artifacts"
    server = mlflow_server.start(f"sqlite:///{root / 'server' / 'mlflow.db'}", artifacts_destination=artifacts,
                                 log_path=root / "server" / "server.log")
    try:
        proc = env.run("run", *SERVED_TINY, f"tracking.uri={server.url}", timeout=600, check=True)
        match = re.search(r"^sweep (\S+): finished", proc.stdout, re.MULTILINE)
        assert match, proc.stdout[-2000:]
        yield ServedSweep(env, server, server.url, artifacts, match.group(1), head, proc.stdout)
    finally:
        server.stop()
        env.cleanup()


# -- a fresh virtualenv shared by the "someone else loads the model" checks (tests/freshvenv.py) -------------
@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from freshvenv import FreshVenv

    venv = FreshVenv(tmp_path_factory.mktemp("fresh") / "venv").create()
    yield venv
    print(f"\nfresh venv timings (s): { {k: round(v, 1) for k, v in venv.timings.items()} }")


# -- two promotions at once ---------------------------------------------------------------------------------
def race(env: SweepsEnv, sweep_id: str, model_name: str, tracking_uri: str) -> None:
    """Promote both trials of a 2-trial sweep at once (two real processes): the better one must end at
    ``@champion``; the other is refused by the gate, or was promoted first and then replaced.

    The better candidate starts first; the worse one starts once the first holds the promotion lock (the
    registered model ``<model>@champion.promote-lock``). The first holds its gate open 15 s before it moves the
    alias: what the second's start needs to reach its own gate (a ``promote`` process: ~11 s in ci11; 20-33 s at a
    load of 10-15 on 2 cores, where it comes too late and there is no contest). The second holds its gate 5 s
    longer than the first: without an atomic gate it reads the same empty alias after the first did and moves it
    last (the worse one wins); with the gate it is refused before its pause, so a green run never sleeps it.
    """
    import json

    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from sweeps.registry.lock import lock_name
    from sweeps.registry.promote import trial_value
    from sweeps.reports.results import load_records

    rec = json.loads((env.home / "sweeps" / f"{sweep_id}.json").read_text())
    trials = load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], settled=True)
    values = {t.trial_id: trial_value(t, t.best_checkpoint, rec["metric"], rec["mode"]) for t in trials}
    assert len(values) == 2, values
    worse, better = sorted(values, key=lambda t: values[t] if rec["mode"] == "max" else -values[t])
    c = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    first = env.popen("promote", sweep_id, "--trial", better, "--model-name", model_name,
                      extra_env={"SWEEPS_TEST_PROMOTE_PAUSE_S": "15"})

    def first_holds_the_lock() -> bool:
        if first.poll() is not None:
            raise AssertionError(f"the first promotion ended (exit {first.returncode}) before it held the lock:\n"
                                 f"{first.communicate()[0][-3000:]}")
        try:
            return c.get_registered_model(lock_name(model_name, "champion")) is not None
        except MlflowException:
            return False

    wait_for(first_holds_the_lock, timeout=300, interval=0.1, what="the first promotion to hold the lock")
    procs = {better: first, worse: env.popen("promote", sweep_id, "--trial", worse, "--model-name", model_name,
                                             extra_env={"SWEEPS_TEST_PROMOTE_PAUSE_S": "20"})}
    outs = {t: p.communicate(timeout=600)[0] for t, p in procs.items()}
    codes = {t: p.returncode for t, p in procs.items()}
    assert set(codes.values()) <= {0, 3} and 0 in codes.values(), outs
    champion = c.get_model_version_by_alias(model_name, "champion")
    versions = {mv.tags["trial_id"]: int(mv.version) for mv in c.search_model_versions(f"name = '{model_name}'")}
    best = max(values.values()) if rec["mode"] == "max" else min(values.values())
    assert float(champion.tags["metric_value"]) == best, (values, codes, outs)
    if values[better] != values[worse]:
        assert champion.tags["trial_id"] == better, (values, codes, outs)
        assert codes[better] == 0, outs[better]
        if codes[worse] == 0:  # it held the lock first: the better one replaced it afterwards
            assert versions[worse] < versions[better] and "replaced" in outs[better], outs
    for t, code in codes.items():
        if code == 3:
            assert "at least as good" in outs[t] and t not in versions, outs[t]  # refused: nothing registered
    assert not [m.name for m in c.search_registered_models() if "promote-lock" in m.name], "the lock is released"


def model_files(c: Any, run: Any) -> set[str]:
    """The files of a trial run's LoggedModel (its best checkpoint, stored once: in the model, not the run)."""
    models = c.search_logged_models([run.info.experiment_id], filter_string=(
        f"tags.`sweeps.trial_id` = '{run.data.tags['sweeps.trial_id']}' AND "
        f"tags.`sweeps.sweep_id` = '{run.data.tags['sweeps.sweep_id']}'"))
    assert len(models) == 1, f"one model per trial, found {len(models)}"
    assert models[0].source_run_id == run.info.run_id, "the model's source run is its trial's run"
    assert not c.list_artifacts(run.info.run_id, "checkpoint"), "no second copy beside the run"
    return {a.path for a in c.list_logged_model_artifacts(models[0].model_id)}
