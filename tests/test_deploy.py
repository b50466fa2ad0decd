"""Fast checks of what a real cluster runs: the KubeRay manifests' `python -m sweeps` commands (each one
dry-run), what a node imports (the libraries only), the remote plan text, and the code-shipping settings."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeps.cli.main import main

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((REPO / "deploy" / "kuberay").glob("*.yaml"))


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def sweeps_commands(text: str) -> list[list[str]]:
    """Every `python -m sweeps ...` in a shell string, nested `sh -c "..."` included, as argv after `sweeps`."""
    out: list[list[str]] = []
    words = shlex.split(text)
    for i, w in enumerate(words):
        if w == "-c" and i + 1 < len(words) and i > 0 and words[i - 1] in ("sh", "bash"):
            out += sweeps_commands(words[i + 1])
    cmd: list[str] | None = None
    for i, w in enumerate([*words, "&&"]):
        if w in ("&&", ";", "||", "|"):
            if cmd is not None:
                out.append(cmd)
            cmd = None
        elif cmd is not None:
            cmd.append(w)
        elif words[max(0, i - 2):i + 1] == ["python", "-m", "sweeps"]:
            cmd = []
    return [c for c in out if c]


def manifest_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            for s in _strings(doc):
                if "python -m sweeps" in s:
                    found += [(path.name, c) for c in sweeps_commands(s)]
    return found


def test_manifests_are_a_raycluster_a_rayjob_and_a_forbid_cronjob() -> None:
    docs = {d["kind"]: d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d}
    rc = docs["RayCluster"]["spec"]
    assert rc["enableInTreeAutoscaling"] is True
    assert rc["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert all(g["minReplicas"] == 0 for g in rc["workerGroupSpecs"])
    assert docs["RayJob"]["spec"]["clusterSelector"]["ray.io/cluster"] == docs["RayCluster"]["metadata"]["name"]
    assert docs["CronJob"]["spec"]["concurrencyPolicy"] == "Forbid"
    for kind in ("RayCluster", "RayJob", "CronJob"):  # token auth on every pod that talks to Ray
        text = yaml.safe_dump(docs[kind])
        assert "RAY_AUTH_MODE" in text and "RAY_AUTH_TOKEN" in text, kind


def test_worker_pods_drain_on_sigterm_within_their_grace_period() -> None:
    """Spot capacity (docs/cluster.md): a deleted worker pod's `ray start --block` marks its node draining for
    RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S (set explicitly: Ray's default is 30 s) so Train's notice (polled every
    5 s) reaches the loops; Kubernetes must not kill the pod before that window ends."""
    docs = {d["kind"]: d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d}
    rc = docs["RayCluster"]["spec"]
    head_env = {e["name"] for e in rc["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    for group in rc["workerGroupSpecs"]:
        assert str(group["rayStartParams"].get("block", "true")).lower() == "true", group["groupName"]
        pod = group["template"]["spec"]
        grace = pod.get("terminationGracePeriodSeconds", 30)  # Kubernetes' default
        for container in pod["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert head_env <= set(env), f"{group['groupName']} lacks {head_env - set(env)} of the head's env"
            drain = float(env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"]["value"])
            assert 30 <= drain < grace, (group["groupName"], drain, grace)
            assert "preStop" not in container.get("lifecycle", {}), "a preStop hook's time counts against the grace"


def test_every_manifest_command_passes_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(REPO / "conf"))
    monkeypatch.chdir(tmp_path)
    commands = manifest_commands()
    assert {name for name, _ in commands} == {"rayjob.yaml", "cronjob.yaml"}, commands
    ran = 0
    for name, argv in commands:
        if argv[0] == "run":
            assert main([*argv, "--dry-run"]) == 0, (name, argv, capsys.readouterr().err)
            out = capsys.readouterr().out
            assert "as many trials as the live cluster holds" in out and "node types: CPU=8" in out, out
            ran += 1
        elif argv[:2] == ["schedule", "add"]:
            overrides = [a for a in argv[3:] if "=" in a and not a.startswith("--")]
            assert main(["run", *overrides, "--dry-run"]) == 0, (name, argv, capsys.readouterr().err)
            assert "as many trials as the live cluster holds" in capsys.readouterr().out
            assert main(argv) == 0, (name, argv, capsys.readouterr().err)  # --no-install: only records it
            assert (tmp_path / "home" / "schedules").is_dir()
            ran += 1
        else:
            assert argv[:2] == ["schedule", "run"], argv  # runs the entry recorded above
    assert ran == 2


def test_a_node_imports_only_the_libraries() -> None:
    """What a trial's driver and its Train workers import: no MLflow, Hydra, Optuna (the nodes lack them)."""
    code = ("import sys; import ray.tune, ray.train.torch; "
            "import sweeps.execution.train.trial, trainables.digits, trainables.diabetes, trainables.loop; "
            "tops = {m.split('.')[0] for m in sys.modules}; "
            "print(sorted(t for t in ('mlflow', 'hydra', 'omegaconf', 'optuna', 'hyperopt', 'matplotlib', "
            "'croniter') if t in tops))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout


def test_elastic_random_search_is_not_a_restored_searcher() -> None:
    """An extension's fresh random searcher made elastic (remote cluster) still gets the search space."""
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.basic_variant import BasicVariantGenerator
    from ray.tune.search.optuna import OptunaSearch

    from sweeps.execution.run.assembly import is_restored
    from sweeps.execution.run.concurrency import Capacity, Census, make_elastic

    class Fixed(Capacity):
        def _compute(self) -> int:  # what the live cluster would say; no Ray here
            return 2

    cap = Fixed({"CPU": 2.0}, {"CPU": 1.0}, 1, 2)
    elastic = make_elastic(BasicVariantGenerator(max_concurrent=2), cap, Census())
    assert type(elastic).__name__ == "GatedVariants" and not is_restored(elastic)
    assert is_restored(make_elastic(OptunaSearch(metric="m", mode="max"), cap, Census()))
    assert isinstance(make_elastic(OptunaSearch(metric="m", mode="max"), cap, Census()), ConcurrencyLimiter)


def test_inside_a_ray_job_the_drivers_runtime_env_may_repeat_the_jobs_env_vars(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray Job that sets SWEEPS_HOME in its env_vars: Ray would refuse the driver's runtime_env that sets it too."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    from sweeps.execution.cluster import shipping
    from sweeps.ops.prepare import prepare

    spec = prepare(["+experiment=quickstart", "cluster=remote", "tracking.uri=http://127.0.0.1:5000"])
    monkeypatch.setenv("RAY_OVERRIDE_JOB_RUNTIME_ENV", "")  # recorded, so the test leaves it as it was
    monkeypatch.delenv("RAY_OVERRIDE_JOB_RUNTIME_ENV")
    monkeypatch.delenv(RAY_JOB_CONFIG_JSON_ENV_VAR, raising=False)
    env = shipping.runtime_env(spec, {})
    assert [Path(m).name for m in env["py_modules"]] == ["sweeps", "trainables"] and ".sweeps/" in env["excludes"]
    from ray.runtime_env.runtime_env import _merge_runtime_env

    job = {"working_dir": "s3://b/code.zip", "env_vars": {"SWEEPS_HOME": "/data"}}
    assert _merge_runtime_env(job, env, override=True)["py_modules"] == env["py_modules"]  # deep-copyable
    import os

    assert os.environ["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1", "set for every remote sweep (Ray's documented switch)"
    monkeypatch.setenv(RAY_JOB_CONFIG_JSON_ENV_VAR, '{"runtime_env": {"env_vars": {"SWEEPS_HOME": "h"}}}')
    shipping.runtime_env(spec, {})
    assert os.environ["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"


def _packed(path: Path, excludes: list[str], include_parent: bool) -> set[str]:
    """The files Ray's runtime_env packaging puts in the zip of ``path`` (its own code, not a copy of it)."""
    import tempfile
    import zipfile

    from ray._private.runtime_env.packaging import _zip_files

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pkg.zip"
        _zip_files(str(path), excludes, str(out), include_gitignore=True, include_parent_dir=include_parent)
        return set(zipfile.ZipFile(out).namelist())


def _sources(root: Path, pkg: str) -> set[str]:
    return {str(p.relative_to(root)) for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts}


def test_shipped_packages_hold_every_module() -> None:
    """py_modules with shipping.EXCLUDES: all of sweeps and trainables (a bare `reports` dropped sweeps/reports)."""
    from sweeps.execution.cluster import shipping

    for pkg in shipping.ALWAYS:
        packed = _packed(REPO / pkg, shipping.EXCLUDES, include_parent=True)
        missing = _sources(REPO, pkg) - packed
        assert not missing, missing
        assert not any("__pycache__" in n for n in packed)


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A user's code outside this repo, on sys.path: a single-file module ``shipone`` (its loop) in folder a,
    and a namespace package ``shipns`` (no ``__init__.py``) with one module in folder a and one in folder b."""
    a, b = tmp_path / "src" / "a", tmp_path / "src" / "b"
    for folder in (a / "shipns" / "__pycache__", b / "shipns"):
        folder.mkdir(parents=True)
    (a / "shipone.py").write_text("def train_loop(config):\n    return 'one'\n")
    (a / "shipns" / "models.py").write_text("def build_model(config):\n    return 'a'\n")
    (a / "shipns" / "__pycache__" / "models.cpython-311.pyc").write_bytes(b"stale")
    (b / "shipns" / "tools.py").write_text("PORTION = 'b'\n")
    monkeypatch.syspath_prepend(str(b))
    monkeypatch.syspath_prepend(str(a))
    monkeypatch.setenv("SWEEPS_ALLOWED_TARGETS", "shipone,shipns")  # the operator's, as on a real cluster
    monkeypatch.chdir(tmp_path)
    yield a, b
    for name in [m for m in sys.modules if m.split(".")[0] in ("shipone", "shipns")]:
        del sys.modules[name]


def _as_ray_ships(runtime_env: dict[str, Any], root: Path,
                  monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, set[str]]]:
    """Each ``py_modules`` entry as a node gets it: Ray's own upload step (``upload_py_modules_if_needed``) packs
    it with Ray's ``create_package``, and Ray's ``unzip_package`` unpacks it as a node does for a GCS package;
    only the GCS put is left out. Returns (the folder Ray puts on the workers' PYTHONPATH, the archive's names)."""
    import copy
    import zipfile

    import ray._private.runtime_env.py_modules as ray_py_modules
    from ray._private.runtime_env.packaging import create_package, unzip_package

    archives: dict[str, Path] = {}

    def pack(pkg_uri: str, base_directory: str, module_path: str, include_gitignore: bool,
             include_parent_dir: bool = False, excludes: list[str] | None = None, logger: Any = None) -> bool:
        archives[pkg_uri] = root / pkg_uri.rsplit("/", 1)[-1]
        create_package(module_path, archives[pkg_uri], include_gitignore=include_gitignore,
                       include_parent_dir=include_parent_dir, excludes=excludes)
        return True

    monkeypatch.setattr(ray_py_modules, "upload_package_if_needed", pack)
    uploaded = ray_py_modules.upload_py_modules_if_needed(copy.deepcopy(runtime_env), include_gitignore=True,
                                                           scratch_dir=str(root))
    out = []
    for uri in uploaded["py_modules"]:
        zip_path = archives[uri]
        names = set(zipfile.ZipFile(zip_path).namelist())
        unzip_package(str(zip_path), str(zip_path.with_suffix("")), remove_top_level_directory=False,
                      unlink_zip=True)
        out.append((zip_path.with_suffix(""), names))
    return out


def test_a_single_file_module_and_a_namespace_package_arrive_importable(
        user_code: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--from shipone:train_loop` (a .py file, no package) and a builder in a namespace package split over two
    folders: Ray packs the file itself and each folder under the package's name, and a fresh interpreter that
    sees only the unpacked folders (a node's view) imports all of it from there."""
    from sweeps.execution.cluster import shipping
    from sweeps.ops.prepare import prepare

    a, b = user_code
    spec = prepare(["+experiment=quickstart", "cluster=remote", "tracking.uri=http://127.0.0.1:5000",
                    "trainable.loop=shipone.train_loop", "trainable.builder=shipns.models.build_model"])
    env = shipping.runtime_env(spec, {})
    assert env["py_modules"][2:] == [str(a / "shipns"), str(b / "shipns"), str(a / "shipone.py")]
    (tmp_path / "node").mkdir()
    shipped = _as_ray_ships(env, tmp_path / "node", monkeypatch)
    assert [names for _, names in shipped[2:]] == [{"shipns/models.py"}, {"shipns/tools.py"}, {"shipone.py"}]
    code = ("import shipone, shipns.models, shipns.tools; "
            "print(shipone.train_loop(None), shipns.models.build_model(None), shipns.tools.PORTION, "
            "shipone.__file__, *shipns.__path__)")
    node = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path / "node",
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(str(d) for d, _ in shipped[2:])})
    assert node.returncode == 0, node.stderr[-2000:]
    words = node.stdout.split()
    assert words[:3] == ["one", "a", "b"], node.stdout
    assert all(w.startswith(str(tmp_path / "node")) for w in words[3:]), "imported from the unpacked folders"


def test_a_module_that_is_not_source_is_not_shipped(caplog: pytest.LogCaptureFixture) -> None:
    """A compiled module cannot travel as py_modules (Ray takes folders, .py files and wheels): it is named."""
    from sweeps.execution.cluster import shipping

    assert shipping.sources("_ctypes") == []
    assert "module _ctypes" in caplog.text and "install it on every node" in caplog.text


def test_the_job_working_dir_upload_is_the_code_and_configs() -> None:
    """`ray job submit --working-dir <checkout>` honours .gitignore and .rayignore: code and configs, not the rest."""
    packed = _packed(REPO, [], include_parent=False)
    missing = (_sources(REPO, "sweeps") | _sources(REPO, "trainables")) - packed
    assert not missing, missing
    tops = {n.split("/")[0] for n in packed}
    assert {"sweeps", "trainables", "conf", "search_spaces", "pyproject.toml"} <= tops, tops
    assert not tops & {".venv", ".git", ".sweeps", "tests", "benchmarks", "docs", "deploy", "reports"}, tops


def test_a_restored_elastic_searcher_reads_the_census_the_resumed_run_feeds() -> None:
    """`resume` unpickles the search algorithm (tuner.pkl): its limiter must read the census that the resumed
    run's callback updates, or paused trials count again and a PBT population larger than the cluster deadlocks."""
    import pickle

    import ray.cloudpickle
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from sweeps.execution.resources import plan as plan_mod
    from sweeps.execution.run import session
    from sweeps.execution.run.callbacks import watchers
    from sweeps.execution.run.concurrency import Capacity, Census, make_elastic
    from sweeps.ops.prepare import prepare

    class Fixed(Capacity):
        def _compute(self) -> int:
            return 2

    alg = make_elastic(BasicVariantGenerator(max_concurrent=2), Fixed({"CPU": 2.0}, {"CPU": 1.0}, 1, 0),
                       session.census_of("s1"))
    restored = pickle.loads(ray.cloudpickle.dumps(alg))
    cells = [c.cell_contents for gate in restored.gates for c in gate.__closure__ or ()]
    (census,) = [c for c in cells if isinstance(c, Census)]
    assert census is session.census_of("s1")
    spec = prepare(["+experiment=quickstart", "cluster=remote", "tracking.uri=http://127.0.0.1:5000"])
    local = prepare(["+experiment=quickstart"])
    the_plan = plan_mod.make_plan(local, plan_mod.local_resources(local), local=True)
    callback = watchers(spec, the_plan, "s1", "s1")["census"]

    class Paused:
        status, trial_id = "PAUSED", "t1"

    callback.on_step_begin(0, [Paused()])
    assert census.paused == {"t1"}
    assert "census" in watchers(local, the_plan, "s1", "s1"), \
        "the embedded Ray counts paused trials too: trials are made only when one can start"


def test_a_paused_trial_is_resumed_only_while_the_cluster_has_room_for_it() -> None:
    """Synchronous PBT resumes its whole population at once: on a remote cluster the trials' drivers alone then
    fill the nodes and every Train worker group times out (seen on CI). Tune resumes a paused trial only through
    the scheduler's choose_trial_to_run, so the gated scheduler says "none" while the running and pending trials
    fill the capacity, and the scheduler's own choice otherwise; a restored sweep (tuner.pkl) keeps the gate."""
    import pickle
    from types import SimpleNamespace

    import ray.cloudpickle
    from ray.tune.schedulers import FIFOScheduler

    from sweeps.execution.run.concurrency import Capacity, capacity_gate
    from sweeps.execution.run.wrappers import sweep_scheduler

    class Fixed(Capacity):
        def _compute(self) -> int:
            return 2

    scheduler = sweep_scheduler(FIFOScheduler(), [capacity_gate(Fixed({"CPU": 2.0}, {"CPU": 1.0}, 1, 0))])
    assert isinstance(scheduler.inner, FIFOScheduler) and not isinstance(scheduler, FIFOScheduler)

    def controller(*statuses: str) -> SimpleNamespace:
        trials = [SimpleNamespace(status=s, trial_id=f"t{i}") for i, s in enumerate(statuses)]
        return SimpleNamespace(get_trials=lambda: trials)

    one_running = controller("RUNNING", "PAUSED", "PAUSED")
    assert scheduler.choose_trial_to_run(one_running) is one_running.get_trials()[1]
    assert scheduler.choose_trial_to_run(controller("RUNNING", "PENDING", "PAUSED")) is None
    assert scheduler.choose_trial_to_run(controller("RUNNING", "RUNNING", "PAUSED")) is None
    restored = pickle.loads(ray.cloudpickle.dumps(scheduler))
    assert restored.choose_trial_to_run(controller("RUNNING", "RUNNING", "PAUSED")) is None
    assert restored.choose_trial_to_run(one_running) is one_running.get_trials()[1]
