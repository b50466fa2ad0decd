"""The built wheel, installed into a fresh virtualenv beside the oldest Ray it supports, used in empty folders.

As a user adopts it: ``pip wheel .``, a fresh venv (uv) with torch, the wheel and ``ray==FLOOR`` (the range's
floor: Ray's public path, every lever off), nothing of this checkout on its path, and every command run from
an empty folder:

- ``init`` (its starter experiment dry-run), ``new trainable mymlp`` (the default template: what it wrote, its
  contract check's ``yes resume``, the next command) and ``run +experiment=mymlp`` (both trials end) under a bundled
  scheduler that the project's own ``conf/scheduler/asha.yaml`` overrides, started together with the starter
  experiment in the project's fresh folder (two sweeps, two embedded Rays, one new store): ``mymlp`` finishes, the
  starter is stopped by SIGTERM after its first trial with a terminal that holds only ``sweeps``' own lines
  (Ray's and MLflow's go to the console log it names), ``resume -v`` (which shows them) finishes it, and Train's
  placement-group cleaner finds its own Ray; ``promote`` of the project's own ``mymlp`` from the ``sweeps``
  script; ``doctor`` passing there and failing where no config resolves;
- the ``hf`` extra named when it is missing (two processes creating a fresh store at once, in process:
  tests/test_tracking.py);
- nothing written into the venv's ``site-packages``.

Why its own sweeps: the whole installation is the subject (a second Ray, a second virtualenv). Slow tier.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, wait_for
from freshvenv import DROP, UV_CACHE, pip_find_links

REMOTE_TRACKING = "tracking.uri=http://127.0.0.1:9"  # cluster=remote refuses a local store before all else
pytestmark = pytest.mark.slow
FLOOR = "2.53.0"  # the oldest Ray of pyproject.toml's range (docs/ray.md, "Ray versions")
SMALL = ["sweep.num_samples=2", "trainable.params.epochs=2", "cluster.health_check_interval_s=0.1"]
NOISE = ("Token authentication is enabled", "Creating initial MLflow database tables", "Configuration for experiment",
         "tensorboard", "RayDeprecationWarning", "worker processes have been started")
MANY_RAYS = "Found multiple active Ray instances"  # Train's cleaner lost its Ray (the state_api_address lever)


class Installed:
    """A fresh venv holding the wheel and Ray FLOOR, and sweeps run from it in a given folder."""

    def __init__(self, root: Path) -> None:
        self.root, self.venv = root, root / "venv"
        self.python = self.venv / "bin" / "python"
        self.uv = Path(sys.executable).parent / "uv"
        self.ray_tmp = Path(tempfile_dir())

    def _uv(self, *args: str) -> None:
        env = {**os.environ, "UV_CACHE_DIR": str(UV_CACHE), "UV_FIND_LINKS": " ".join(pip_find_links())}
        for offline in ("1", "0"):  # a warm cache first; the registry for what it lacks
            proc = subprocess.run([str(self.uv), *args], env={**env, "UV_OFFLINE": offline}, capture_output=True,
                                  text=True, timeout=1200)
            if proc.returncode == 0:
                return
        raise AssertionError(f"uv {' '.join(args)} failed:\n{proc.stderr[-3000:]}")

    def create(self) -> Installed:
        wheels = self.root / "wheels"
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                               capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr[-3000:]
        (wheel,) = wheels.glob("sweeps-*.whl")
        self._uv("venv", "-q", "--python", sys.executable, str(self.venv))
        self._uv("pip", "install", "-q", "--python", str(self.python), "torch==2.13.0")
        self._uv("pip", "install", "-q", "--python", str(self.python), str(wheel),
                 f"ray[default,tune,train]=={FLOOR}")
        return self

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        drop = (*DROP, "SWEEPS_CONSOLE")  # what every fresh venv drops (PYTHONDONTWRITEBYTECODE: freshvenv.DROP)
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(HOME=str(self.root / "user"), RAY_TMPDIR=str(self.ray_tmp), RAY_USAGE_STATS_ENABLED="0",
                   PYTHONUNBUFFERED="1", PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                   SWEEPS_HOME=str(home), **extra)
        return env

    def sweeps(self, folder: Path, *args: str, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / "sweeps"), *args], cwd=folder,
                              env=self.env(folder / ".sweeps", **extra), capture_output=True, text=True,
                              timeout=timeout)

    def start(self, folder: Path, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([str(self.venv / "bin" / "sweeps"), *args], cwd=folder,
                                env=self.env(folder / ".sweeps"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def site_packages(self) -> dict[str, float]:
        (site,) = (self.venv / "lib").glob("python3.*/site-packages")
        return {str(p): p.stat().st_mtime for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                and not p.suffix == ".pyc"}

    def cleanup(self) -> None:
        subprocess.run(["pkill", "-9", "-f", str(self.ray_tmp)], check=False)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="rf", dir="/tmp")  # unix sockets need short paths


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return proc.stdout + proc.stderr


@pytest.mark.timeout(2400)
def test_the_wheel_on_the_floor_ray_runs_from_empty_folders_and_writes_nothing_into_site_packages(
        tmp_path: Path) -> None:
    """The installed wheel beside the floor Ray, every command from an empty folder (the module's docstring lists
    them). Why its own sweeps: they run from a fresh virtualenv without this checkout; every command of the wheel
    shares that one environment."""
    inst = Installed(tmp_path).create()
    try:
        before = inst.site_packages()
        check = subprocess.run([str(inst.python), "-c", "import ray, sweeps, sys; print(ray.__version__, "
                                "sweeps.__file__)"], cwd=tmp_path, env=inst.env(tmp_path / "h"), capture_output=True,
                               text=True, timeout=120)
        version, where = ok(check).split()
        assert version == FLOOR and str(inst.venv) in where, "the wheel's sweeps, not this checkout's"

        # a project of one's own: init, a trainable, a bundled scheduler overridden by the project's own file
        proj = tmp_path / "proj"
        proj.mkdir()
        ok(inst.sweeps(proj, "init"))
        assert "sweep          : starter" in ok(inst.sweeps(proj, "run", "+experiment=starter", "--dry-run"))
        made = ok(inst.sweeps(proj, "new", "trainable", "mymlp"))  # the default template, no --from
        assert "wrote" in made and "yes resume" in made and "next: python -m sweeps run +experiment=mymlp" in made, \
            made[-3000:]
        assert (proj / "mymlp.py").is_file() and (proj / "conf" / "experiment" / "mymlp.yaml").is_file()
        (proj / "conf" / "scheduler").mkdir()
        bundled_asha = next(inst.venv.glob("lib/python3.*/site-packages/sweeps/_bundled/conf/scheduler/asha.yaml"))
        (proj / "conf" / "scheduler" / "asha.yaml").write_text(
            bundled_asha.read_text().replace("grace_period: 2", "grace_period: 1"))
        dry = ok(inst.sweeps(proj, "run", "+experiment=mymlp", "--dry-run"))
        assert f"scheduler: asha <- {proj / 'conf' / 'scheduler' / 'asha.yaml'}" in dry, dry
        assert "searcher: random <- " in dry and "_bundled" in dry
        # two sweeps started together in the project's fresh folder (no .sweeps/ yet): the project's own trainable
        # runs to the end; the starter (the bundled digits trainable) is stopped by SIGTERM after its first trial,
        # resumed and finishes (the floor's spine: run, stop, resume, promote)
        assert not (proj / ".sweeps").exists()
        mymlp = inst.start(proj, "run", "+experiment=mymlp", *SMALL)
        time.sleep(3)
        starter = inst.start(proj, "run", "+experiment=starter", *SMALL, "sweep.max_concurrent_trials=1",
                             "+trainable.params.epoch_sleep_s=1.0")
        log = lambda: list((proj / ".sweeps" / "logs").glob("starter-*.log"))  # noqa: E731
        wait_for(lambda: log() and '"status": "TERMINATED"' in log()[0].read_text() or starter.poll() is not None,
                 600, 1.0, "the starter's first trial to end")
        assert starter.poll() is None, starter.communicate()[1][-3000:]
        starter.send_signal(signal.SIGTERM)
        out, err = starter.communicate(timeout=300)
        assert starter.returncode == 130, (out + err)[-4000:]
        terminal = out + err
        assert "Ray's, Tune's, MLflow's and the trials' own output" in err, err[-2000:]
        for noise in NOISE:
            assert noise not in terminal, f"{noise!r} reached the terminal:\n{terminal[-3000:]}"
        consoles = set((proj / ".sweeps" / "logs").glob("console-*.log"))
        assert any("Configuration for experiment" in c.read_text() for c in consoles), "Tune's box is in a console log"
        out, err = mymlp.communicate(timeout=900)
        assert mymlp.returncode == 0 and "finished" in out + err, (out + err)[-4000:]
        (starter_record,) = (proj / ".sweeps" / "sweeps").glob("starter-*.json")
        resumed = ok(inst.sweeps(proj, "resume", starter_record.stem, "-v"))  # -v after the command: everything here
        assert "finished" in resumed
        assert f"ray {FLOOR} is not a version it was checked against" in resumed, resumed[-3000:]
        assert "View detailed results here" in resumed, f"-v shows Tune's lines:\n{resumed[-3000:]}"
        assert set((proj / ".sweeps" / "logs").glob("console-*.log")) == consoles, "-v writes no console log"
        many = [str(p) for p in inst.ray_tmp.rglob("*.err") if MANY_RAYS in p.read_text(errors="replace")]
        assert not many, f"{MANY_RAYS!r}: Train's placement-group cleaner died in {many[:3]}"
        (record,) = (proj / ".sweeps" / "sweeps").glob("mymlp-*.json")
        rec = json.loads(record.read_text())
        assert rec["config"]["scheduler"]["grace_period"] == 1, "the project's asha.yaml won"
        c = rec["counts"]
        assert rec["status"] == "finished" and c["completed"] + c["early_stopped"] == 2 and not c["failed"], \
            ("both trials of the scaffold's own loop ran to their end", c)
        # the project's own trainable, imported by the `sweeps` script (its sys.path starts at the venv's bin/)
        promoted = inst.sweeps(proj, "promote", record.stem, "--model-name", "floor-mymlp")
        assert promoted.returncode == 0, (promoted.stdout + promoted.stderr)[-4000:]
        assert "experiments compose" in ok(inst.sweeps(proj, "doctor"))
        missing = inst.sweeps(proj, "run", "+experiment=charlm", "--dry-run")
        assert missing.returncode == 2 and "pip install 'sweeps[hf]'" in missing.stderr, missing.stderr
        empty = tmp_path / "empty"
        empty.mkdir()
        no_conf = inst.sweeps(empty, "doctor", SWEEPS_CONF_DIR=str(empty / "nothing"))
        assert no_conf.returncode != 0 and "configs" in no_conf.stdout, no_conf.stdout[-2000:]
        inside = inst.sweeps(empty, "new", "trainable", "x", "--dir", str(Path(where).parent.parent))
        assert inside.returncode == 2 and "where installed packages live" in inside.stderr, inside.stderr

        # a cluster on the floor's Ray, a driver on this checkout's: one line naming both, exit 2, in < 10 s
        mismatch(inst, tmp_path)
        after = inst.site_packages()
        written = sorted(p for p in after if p not in before or after[p] != before[p])
        assert not written, f"written into site-packages: {written[:10]}"
    finally:
        inst.cleanup()


def mismatch(inst: Installed, tmp_path: Path) -> None:
    """A head started from the floor's venv with token authentication (as every Ray from 2.59 starts); the
    project's own driver (this checkout's Ray) refuses it: ``run``, ``run --dry-run`` and ``doctor --address``,
    with the ``cluster_version`` lever on and switched off (the public way: Ray's own refusal in a child process),
    each with one line and exit 2 (doctor: its check failed) in < 10 s; without the token, one line naming it, as
    fast; and nothing of the driver left running (no process carrying its own RAY_TMPDIR or SWEEPS_HOME)."""
    import contextlib

    import psutil
    import ray

    from sweeps.ports import free_port

    def carrying(marks: dict[str, str]) -> list[str]:
        """Processes whose environment holds any of ``marks`` (the driver's children inherit it)."""
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                env = p.environ()
            except (psutil.Error, OSError):
                continue
            if any(env.get(k) == v for k, v in marks.items()):
                found.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:200]}")
        return found

    port, head_tmp, token = free_port(), tempfile_dir(), tmp_path / "head-token"
    address = f"127.0.0.1:{port}"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    env = {**inst.env(tmp_path / "head-home"), "RAY_TMPDIR": head_tmp, "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN_PATH": str(token)}
    started = subprocess.run([str(inst.venv / "bin" / "ray"), "start", "--head", "--port", str(port), "--num-cpus",
                              "1", "--include-dashboard=false", "--disable-usage-stats"], env=env, capture_output=True,
                             text=True, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        for off in ("", "cluster_version"):
            marks = {"RAY_TMPDIR": tempfile_dir(), "SWEEPS_HOME": str(tmp_path / f"driver-home{off}")}
            drop = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
            driver_env = {**{k: v for k, v in os.environ.items() if k not in drop}, **marks, "HOME": str(
                tmp_path / "user2"), "SWEEPS_CONSOLE": "terminal", "SWEEPS_LEVERS_OFF": off}
            t0 = time.monotonic()
            # a tracking server's URI (none listens: the cluster is refused first), as cluster=remote needs one
            proc = subprocess.run([sys.executable, "-m", "sweeps", "run", "+experiment=quickstart", "cluster=remote",
                                   f"cluster.address={address}", REMOTE_TRACKING], cwd=tmp_path, env=driver_env,
                                  capture_output=True, text=True, timeout=120)
            took, said = time.monotonic() - t0, proc.stdout + proc.stderr
            assert proc.returncode == 2 and took < 10 and "has token authentication on" in said, (off, took, said)
            assert "Traceback" not in said and not carrying(marks), (off, said[-3000:], carrying(marks))
            driver_env["RAY_AUTH_TOKEN_PATH"] = str(token)
            canary = subprocess.Popen(["sleep", "60"], env=driver_env)  # the check below sees what it should
            assert any(line.startswith(f"{canary.pid}:") for line in carrying(marks)), "the leftover check works"
            canary.kill()
            canary.wait()
            run = ["run", "+experiment=quickstart", "cluster=remote", f"cluster.address={address}", REMOTE_TRACKING]
            for args in (run, [*run, "--dry-run"], ["doctor", "--address", address]):
                t0 = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=tmp_path, env=driver_env,
                                      capture_output=True, text=True, timeout=120)
                took, said = time.monotonic() - t0, proc.stdout + proc.stderr
                what = (off or "lever on", " ".join(args[:1] + args[-1:]), proc.returncode, round(took, 1))
                if args[0] == "doctor":
                    assert proc.returncode == 1 and "[FAIL] cluster versions" in proc.stdout, (what, said[-3000:])
                else:
                    assert proc.returncode == 2 and said.count("cluster.address:") == 1, (what, said[-3000:])
                assert took < 10, (what, said[-3000:])
                assert f"runs Ray {FLOOR}" in said and f"this driver Ray {ray.__version__}" in said, (what, said)
                assert "ray job submit --address http://127.0.0.1:" in said and "Traceback" not in said, (what, said)
                assert '--runtime-env-json \'{"py_modules": ["' in said and "--dry-run" not in said.split(
                    "ray job submit")[1], (what, said[-3000:])
                left = carrying(marks)
                assert not left, (what, "the refused driver left these running", left)
    finally:  # the head's processes by its RAY_TMPDIR (its Ray Client server's command line does not name it)
        for line in carrying({"RAY_TMPDIR": head_tmp}):
            with contextlib.suppress(psutil.Error):
                psutil.Process(int(line.split(":", 1)[0])).kill()
