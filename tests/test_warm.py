"""The warm trial start's switches and its placement-group reaper, on a real (small) Ray. Fast tier.

The levers that touch Ray internals are checked against the installed Ray version before a sweep starts;
another version (``SWEEPS_TEST_RAY_VERSION``) or ``SWEEPS_WARM=0`` gives the public path. The reaper frees
the named placement group of a Train run whose controller died (Ray keeps it until the job ends).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from sweeps.execution.levers import core as levers_core
from sweeps.execution.warmstart import reaper, warm


@pytest.fixture(autouse=True)
def _fresh_levers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm, "_current", None)
    monkeypatch.delenv(warm.SWITCH, raising=False)
    monkeypatch.delenv(levers_core.TEST_RAY_VERSION, raising=False)


def test_every_lever_is_on_for_the_ray_it_was_checked_against() -> None:
    import ray

    from sweeps.execution.levers import lean_trainer

    assert ray.__version__.startswith(lean_trainer.LEVER.checked), "the installed Ray: the one the levers were read for"
    levers = warm.levers(local=True)
    assert (levers.lean, levers.pool, levers.reuse) == (True, True, False), levers.why_off
    assert levers.describe().startswith("warm start: lean, pool; reuse off (opt-in")


@pytest.mark.parametrize("version", ["2.59.1", "2.61.0", "3.0.0"])
def test_another_ray_version_falls_back_to_the_public_path_and_says_why(
        version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, version)
    levers = warm.levers(local=True)
    assert not levers.lean and not levers.pool and not levers.reuse
    assert f"ray {version} is not a version it was checked against" in levers.why_off["lean"]
    assert "lean off" in levers.describe() and "pool off" in levers.describe()


def test_sweeps_warm_0_turns_every_lever_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.SWITCH, "0")
    levers = warm.levers(local=True)
    assert not (levers.lean or levers.pool or levers.reuse)
    assert set(levers.why_off.values()) == {"SWEEPS_WARM=0"}


def test_a_trial_setup_follows_the_levers(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.config import build, compose
    from sweeps.execution.tuning import tuner

    spec = build.build_spec(compose.compose(["+experiment=quickstart"]))
    assert tuner.trial_setup(spec, "s1").lean and not tuner.reuse_actors(spec)
    monkeypatch.setattr(warm, "_current", None)
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
    assert not tuner.trial_setup(spec, "s1").lean
    monkeypatch.setenv("SWEEPS_REUSE_ACTORS", "1")
    assert tuner.reuse_actors(spec), "an explicit SWEEPS_REUSE_ACTORS wins"


def test_placement_group_names_carry_sweep_and_trial() -> None:
    name = reaper.pg_name("quickstart-20261202-1", "a1b2c_00003", "a1b2c_00003-9f8e7d")
    assert reaper.parse(name) == ("quickstart-20261202-1", "a1b2c_00003")
    assert reaper.parse("some-other-group") is None and reaper.parse("") is None
    assert reaper.parse("sweeps:only:two") is None


REAP = textwrap.dedent("""
    import json, sys, time
    import ray
    from ray.util.placement_group import placement_group
    from sweeps.execution.warmstart import reaper

    ray.init(num_cpus=3, include_dashboard=False)

    @ray.remote(num_cpus=0)
    class Controller:  # creates its worker group's placement group, as Train's controller does
        def start(self, name):
            pg = placement_group([{"CPU": 1}], name=name)
            ray.get(pg.ready())
            return True

    def state(name):
        return {e["name"]: e["state"] for e in ray.util.placement_group_table().values()}.get(name)

    out = {}
    stopped, running = reaper.pg_name("s1", "t1", "t1-aaa"), reaper.pg_name("s1", "t2", "t2-bbb")
    other_sweep = reaper.pg_name("s2", "t1", "t1-ccc")
    actors = [Controller.remote() for _ in range(3)]
    ray.get([a.start.remote(n) for a, n in zip(actors, (stopped, running, other_sweep))])
    ray.kill(actors[0])  # Tune stopped trial t1: its controller died with the trial actor
    time.sleep(float(sys.argv[1]))
    out["kept_by_ray"] = state(stopped)
    out["orphans"] = reaper.orphans("s1", running={"t2"})
    if sys.argv[2] == "reap":
        out["removed"] = reaper.remove(out["orphans"])
    time.sleep(0.5)
    out["after"] = {n: state(n) for n in (stopped, running, other_sweep)}
    out["free_cpus"] = ray.available_resources().get("CPU", 0)
    print(json.dumps(out))
""")


def _reap(tmp_path: Path, mode: str) -> dict:
    import json

    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "HOME": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        proc = subprocess.run([sys.executable, "-c", REAP, "2", mode], env=env, capture_output=True, text=True,
                              timeout=100)
    finally:
        subprocess.run(["pkill", "-9", "-f", ray_tmp], check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_ray_keeps_a_dead_controllers_placement_group_and_the_reaper_frees_only_orphans(tmp_path: Path) -> None:
    out = _reap(tmp_path, "reap")
    stopped, running, other = reaper.pg_name("s1", "t1", "t1-aaa"), reaper.pg_name("s1", "t2", "t2-bbb"), \
        reaper.pg_name("s2", "t1", "t1-ccc")
    assert out["kept_by_ray"] == "CREATED", "Ray frees a dead actor's group only when its job ends"
    assert out["orphans"] == [stopped], "a running trial's group and another sweep's are not touched"
    assert out["removed"] == 1
    assert out["after"] == {stopped: "REMOVED", running: "CREATED", other: "CREATED"}
    assert out["free_cpus"] == 1.0


def test_without_the_reaper_the_stopped_trials_group_holds_its_cpu(tmp_path: Path) -> None:
    out = _reap(tmp_path, "keep")
    assert out["after"][reaper.pg_name("s1", "t1", "t1-aaa")] == "CREATED" and out["free_cpus"] == 0.0


def test_the_stall_story_reads_rays_private_tables_only_on_a_checked_ray(
        local_ray: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog's explanation on a real (in-process) Ray: free resources per node come from a GCS table
    behind ``ray._private``, so on an unchecked Ray they read '?' while the public parts (nodes, placement
    groups) stay."""
    from sweeps.execution.run import stall

    watch = stall.Watch("sw", {"CPU": 2.0}, None)
    checked = stall.explain(watch, [])
    assert "free: node " in checked and ": CPU=2 of CPU=2" in checked, checked
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
    public = stall.explain(watch, [])
    assert "free: node " in public and ": ? of CPU=2" in public, public
    assert stall._other_jobs_actors() == 0


@pytest.mark.parametrize(("at_once", "workers", "cores", "preloads"), [
    (1, 2, 2, True),     # one trial at a time: its next trial's processes import torch on a free core
    (1, 4, 2, True),
    (2, 2, 2, False),    # the quickstart on this box: the trials' workers fill the cores
    (2, 1, 2, False),
    (3, 1, 2, False),
    (2, 2, 16, True),    # cores to spare
    (2, 2, 4, False),    # exactly filled
    (2, 2, 5, True),
])
def test_warm_processes_preload_torch_only_where_a_core_is_free_for_it(
        at_once: int, workers: int, cores: int, preloads: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.warmstart import pool

    monkeypatch.delenv(pool.PRELOAD_SWITCH, raising=False)
    got, why = pool.preload(at_once, workers, cores)
    assert got is preloads, why
    from sweeps.execution.levers import raylet_config

    assert bool(raylet_config.init_kwargs(got).get("_system_config")) is preloads


def test_sweeps_preload_forces_the_preload_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.warmstart import pool

    monkeypatch.setenv(pool.PRELOAD_SWITCH, "1")
    assert pool.preload(4, 4, 2) == (True, "SWEEPS_PRELOAD=1")
    monkeypatch.setenv(pool.PRELOAD_SWITCH, "0")
    assert pool.preload(1, 1, 64) == (False, "SWEEPS_PRELOAD=0")
    monkeypatch.setenv(pool.PRELOAD_SWITCH, "yes")  # not a value it knows: the rule decides, and says so
    assert pool.preload(2, 2, 2) == (False, "2 trials x 2 Train workers fill the 2 cores; SWEEPS_PRELOAD='yes' "
                                            "ignored: 0 or 1")


PRELOADED = textwrap.dedent("""
    import json, sys
    import ray
    from sweeps.config import build, compose
    from sweeps.execution.warmstart import pool
    from sweeps.execution.cluster import raystart

    spec = build.build_spec(compose.compose(["+experiment=quickstart"]))
    at_once = int(sys.argv[1])
    raystart.start(spec, 3, None, at_once)

    @ray.remote(num_cpus=0)
    class Probe:  # any actor the sweep starts (a synchronization actor, a coordinator, a Train worker)
        def imported(self):
            return "torch" in sys.modules

    print(json.dumps({"torch": ray.get(Probe.remote().imported.remote()),
                      "expected": pool.preload(at_once, spec.trainable.num_workers)[0]}))
""")


def test_the_embedded_ray_preloads_torch_into_its_processes_as_the_plan_decides(tmp_path: Path) -> None:
    """A real embedded Ray started by the sweep's own start: one trial at a time, its processes hold torch
    before any work; eight 2-worker trials at once (more than the cores), they do not."""
    import json

    procs = {}
    ray_tmps = []
    for at_once in ("1", "8"):
        ray_tmps.append(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
        env = {k: v for k, v in os.environ.items() if k != "SWEEPS_PRELOAD"}
        env.update(RAY_TMPDIR=ray_tmps[-1], HOME=str(tmp_path), SWEEPS_HOME=str(tmp_path / at_once),
                   RAY_USAGE_STATS_ENABLED="0")
        procs[at_once] = subprocess.Popen([sys.executable, "-c", PRELOADED, at_once], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        outs = {k: p.communicate(timeout=100) for k, p in procs.items()}
    finally:
        for t in ray_tmps:
            subprocess.run(["pkill", "-9", "-f", t], check=False)
    got = {}
    for k, (out, err) in outs.items():
        assert procs[k].returncode == 0, err[-3000:]
        got[k] = json.loads(out.strip().splitlines()[-1])
    assert got["1"] == {"torch": True, "expected": True}
    assert got["8"]["torch"] is got["8"]["expected"]
    if os.cpu_count() and os.cpu_count() <= 16:
        assert got["8"]["torch"] is False, "eight 2-worker trials fill this machine's cores"


# -- issue 43: processes leasable only once warm, a pool that waits out each start, the controller in the trial --

def test_the_pool_waits_while_a_trial_is_between_its_start_and_its_first_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.warmstart import pool

    monkeypatch.delenv(pool.HOLD_SWITCH, raising=False)
    assert pool.holds({"t1": 100.0}, now=101.0)
    assert not pool.holds({"t1": 100.0}, now=100.0 + pool.HOLD_MAX_S + 1), "a start that never reports"
    assert not pool.holds({}, now=101.0)
    cb = pool.pool_callback(5, 1, 3)

    class T:
        trial_id = "t1"

    cb.on_trial_start(0, [], T())
    cb.on_step_begin(0, [])  # no refill asked for (it would need the raylet): the pool is not even made
    assert cb.pool is None and "t1" in cb.starting
    cb.on_trial_result(0, [], T(), {})
    assert not cb.starting
    monkeypatch.setenv(pool.HOLD_SWITCH, "0")
    assert not pool.holds({"t1": 100.0}, now=101.0), "the benchmarks' baseline refills during starts"


SITE_PROBE = "import json, sys; print(json.dumps({'colorsys': 'colorsys' in sys.modules, 'argv': sys.argv[1:]}))"


def _site_run(tmp_path: Path, script: str, *args: str, extra_path: str = "") -> dict:
    import json

    from sweeps.execution.levers import site_preload

    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", site_preload.MODULES_ENV)}
    folder = site_preload.install(("colorsys",), root=str(tmp_path))
    try:
        env = {**os.environ}
        if extra_path:
            env["PYTHONPATH"] += os.pathsep + extra_path
        path = tmp_path / script
        path.write_text(SITE_PROBE)
        out = subprocess.run([sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=60)
    finally:
        site_preload.uninstall(folder)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_ray_worker_imports_the_preload_before_it_runs_and_nothing_else_does(tmp_path: Path) -> None:
    """The site_preload lever's sitecustomize: a Ray worker process of the WORKER kind imports the preload at
    interpreter start (before default_worker.py connects to the raylet); a spill worker and any other script
    do not; a sitecustomize further along the path still runs."""
    assert _site_run(tmp_path, "default_worker.py", "--node-ip-address=127.0.0.1")["colorsys"]
    assert _site_run(tmp_path, "default_worker.py", "--worker-type=WORKER")["colorsys"]
    assert not _site_run(tmp_path, "default_worker.py", "--worker-type=SPILL_WORKER")["colorsys"]
    assert not _site_run(tmp_path, "train.py")["colorsys"]
    other = tmp_path / "theirs"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nsys.argv.append('theirs ran')\n")
    assert _site_run(tmp_path, "train.py", extra_path=str(other))["argv"] == ["theirs ran"]
    assert "SWEEPS_SITE_PRELOAD" not in os.environ, "uninstalled"


IN_TRIAL = textwrap.dedent("""
    import json, os
    import ray, ray.train
    from ray.train.v2.api.callback import UserCallback
    from sweeps.execution.levers import lean_trainer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    def loop(config):
        ray.train.report({"x": 1.0})

    class Where(UserCallback):
        started = None
        def controller_started(self, at):
            Where.started = at
        def after_report(self, run_context, metrics, checkpoint):
            Where.pid = os.getpid()

    @ray.remote(num_cpus=0)
    class TrialActor:  # as Tune's trial actor runs the trial's fit()
        def fit(self):
            cls, named = lean_trainer.trainer("sweeps:s:t:r")
            result = cls(loop, scaling_config=ray.train.ScalingConfig(num_workers=1),
                         run_config=ray.train.RunConfig(name="r", storage_path=os.environ["STORE"],
                                                        callbacks=[Where(), *named])).fit()
            here = getattr(Where, "pid", None) == os.getpid()
            return {"cls": cls.__name__, "metrics": result.metrics, "here": here, "started": Where.started is not None}

    print(json.dumps(ray.get(TrialActor.remote().fit.remote())))
""")


def test_the_controller_runs_in_the_trial_actors_process(tmp_path: Path) -> None:
    """A lean fit runs Train's controller in the calling process (the trial actor's in a sweep): its report
    callbacks run here, and the run ends with the loop's metrics; with the lever off, an actor of its own."""
    import json

    got, procs = {}, {}
    try:
        for off in ("", "controller_in_trial"):  # both at once, each on its own Ray
            ray_tmp, home = tempfile.mkdtemp(prefix="rt", dir="/tmp"), tmp_path / f"home{len(procs)}"
            home.mkdir()
            env = {**os.environ, "RAY_TMPDIR": ray_tmp, "HOME": str(home),
                   "RAY_USAGE_STATS_ENABLED": "0", "STORE": str(tmp_path / f"store{len(procs)}"),
                   "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0", levers_core.OFF: off}
            procs[off] = (ray_tmp, subprocess.Popen([sys.executable, "-c", IN_TRIAL], env=env, text=True,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for off, (_, proc) in procs.items():
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
            got[off] = json.loads(out.strip().splitlines()[-1])
    finally:
        for ray_tmp, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            subprocess.run(["pkill", "-9", "-f", ray_tmp], check=False)
    assert got[""] == {"cls": "InTrialTorchTrainer", "metrics": got["controller_in_trial"]["metrics"], "here": True,
                       "started": True}, got
    assert got["controller_in_trial"]["cls"] == "LeanTorchTrainer" and not got["controller_in_trial"]["here"]
