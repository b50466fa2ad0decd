"""A fresh virtualenv for "someone else loads the registered model" checks: no sweeps, no trainables.

Built with uv (``uv`` comes with the test extras): ``uv venv``, then ``torch==2.13.0`` alone, then
``mlflow==<this mlflow>``, then each model's own ``requirements.txt``. uv ignores pip's configuration, so the
find-links that pip is configured with (where the CPU torch wheel lies on this kind of machine) are passed on;
without them ``torch==2.13.0`` resolves to the multi-GB CUDA build. The uv cache lives in the system temp dir
(shared by every session on the machine, hard-linked into each venv): a warm cache builds the venv in seconds
and installs offline; a cold one downloads once (about 2 minutes).

Processes run from the venv's own folder with ``PYTHONPATH`` unset and the venv's ``bin`` first on ``PATH``
(``mlflow models serve`` execs ``uvicorn`` by name).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

UV_CACHE = Path(tempfile.gettempdir()) / "sweeps-test-uv-cache"
# PYTHONDONTWRITEBYTECODE too: uv installs no bytecode, so with it set every process in the venv would compile torch
# and mlflow from source on each import; without it the first import writes the bytecode the others read
DROP = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "SWEEPS_HOME", "SWEEPS_CONF_DIR", "PYTHONDONTWRITEBYTECODE")


def pip_find_links() -> list[str]:
    """The find-links pip is configured with (environment and config files), for uv."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    links = [v for v in os.environ.get("PIP_FIND_LINKS", "").split() if v]
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            links += value.strip().strip("'\"").split()
    return list(dict.fromkeys(links))


class FreshVenv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"
        self.uv = Path(sys.executable).parent / "uv"
        self.find_links = pip_find_links()
        self.timings: dict[str, float] = {}

    def _uv(self, *args: str, what: str) -> None:
        env = {**os.environ, "UV_CACHE_DIR": str(UV_CACHE), "UV_FIND_LINKS": " ".join(self.find_links)}
        t0 = time.monotonic()
        for offline in ("1", "0"):  # offline from a warm cache first; online when something is missing
            proc = subprocess.run([str(self.uv), *args], env={**env, "UV_OFFLINE": offline}, capture_output=True,
                                  text=True, timeout=900)
            if proc.returncode == 0:
                self.timings[what] = time.monotonic() - t0
                return
        raise AssertionError(f"uv {' '.join(args)} failed:\n{proc.stderr[-3000:]}")

    def create(self) -> FreshVenv:
        if not self.uv.is_file():
            raise AssertionError(f"{self.uv} is missing: install the test extras (pip install -e '.[test]')")
        import mlflow

        self._uv("venv", "-q", "--python", sys.executable, str(self.root), what="venv")
        # torch first and alone: the local CPU wheel, never the CUDA build
        self._uv("pip", "install", "-q", "--python", str(self.python), "torch==2.13.0", what="torch")
        self._uv("pip", "install", "-q", "--python", str(self.python), f"mlflow=={mlflow.__version__}",
                 what="mlflow")
        return self

    def install_requirements(self, requirements: str) -> None:
        self._uv("pip", "install", "-q", "--python", str(self.python), "-r", requirements,
                 what=f"requirements {Path(requirements).parent.name}")

    def env(self, tracking_uri: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in DROP}
        env.update(MLFLOW_TRACKING_URI=tracking_uri, MLFLOW_REGISTRY_URI=tracking_uri,
                   PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        return env

    def run(self, code: str, *args: str, tracking_uri: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``python -c code args`` in the venv, from the venv's folder (not the repository)."""
        return subprocess.run([str(self.python), "-c", code, *args], cwd=self.root, env=self.env(tracking_uri),
                              capture_output=True, text=True, timeout=timeout)

    def predict(self, jobs: list[dict[str, Any]], tracking_uri: str, out: Path) -> list[dict[str, Any]]:
        """Load each ``{"uri", "frame": {columns, data}, "params", "tracking_uri"}`` with mlflow.pyfunc.load_model
        in the venv and predict: what came back (columns as lists) per job, then what the venv could import."""
        spec = out.with_suffix(".in.json")
        spec.write_text(json.dumps(jobs))
        proc = self.run(PREDICT, str(spec), str(out), tracking_uri=tracking_uri)
        assert proc.returncode == 0, proc.stderr[-4000:]
        result: list[dict[str, Any]] = json.loads(out.read_text())
        return result

    @contextmanager
    def serve(self, model_uri: str, tracking_uri: str, log: Path, timeout: float = 420) -> Iterator[str]:
        """``mlflow models serve --env-manager local`` on 127.0.0.1; yields its base URL; stops its process group."""
        from sweeps.ports import free_port

        port = free_port()  # never one of Ray's default ports (a Ray of another test may start meanwhile)
        with log.open("w") as f:
            proc = subprocess.Popen([str(self.root / "bin" / "mlflow"), "models", "serve", "-m", model_uri,
                                     "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
                                    cwd=self.root, env=self.env(tracking_uri), stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while not _healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"mlflow models serve did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: the CLI and the uvicorn it started
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def invocations(url: str, body: dict[str, Any]) -> Any:
    """POST /invocations with a JSON body; the decoded answer (HTTPError on a 4xx/5xx)."""
    req = urllib.request.Request(f"{url}/invocations", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def requirements_file(model_uri: str, tracking_uri: str) -> str:
    """The registered model's requirements.txt, downloaded with the test's MLflow (no global URI is touched)."""
    import tempfile as tf

    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    name, _, alias = model_uri.removeprefix("models:/").partition("@")
    c = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    logged = c.get_logged_model(c.get_model_version_by_alias(name, alias).source.removeprefix("models:/"))
    return str(mlflow.artifacts.download_artifacts(artifact_uri=f"{logged.artifact_location}/requirements.txt",
                                                   tracking_uri=tracking_uri, dst_path=tf.mkdtemp()))


PREDICT = r"""
import importlib.util, json, sys
import mlflow, pandas as pd
jobs = json.load(open(sys.argv[1]))
out = []
for job in jobs:
    if job.get("tracking_uri"):
        mlflow.set_tracking_uri(job["tracking_uri"])
        mlflow.set_registry_uri(job["tracking_uri"])
    model = mlflow.pyfunc.load_model(job["uri"])
    pred = model.predict(pd.DataFrame(**job["frame"]), params=job.get("params"))
    out.append({"pred": pred.to_dict(orient="list"),
                "inputs": model.metadata.get_input_schema().input_names(),
                "outputs": model.metadata.get_output_schema().input_names()})
out.append({"sweeps": importlib.util.find_spec("sweeps") is not None,
            "trainables": importlib.util.find_spec("trainables") is not None,
            "transformers": importlib.util.find_spec("transformers") is not None,
            "path": sys.path})
json.dump(out, open(sys.argv[2], "w"))
"""
