"""One way for a slow test to run a sweep and read what it left: :class:`Sweep`.

A test runs a sweep the way a user does, as ``python -m sweeps`` processes (or the Python API in a fresh
interpreter, :meth:`Sweep.python`) in a :class:`conftest.SweepsEnv` (its own SWEEPS_HOME, MLflow SQLite store,
Ray temp dir and HOME), and reads the outcome from what the sweep left: its index record, its trials' result rows,
its MLflow runs and registered models. Nothing here imports Ray; the readers import MLflow when asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import SweepsEnv, mlflow_client, trial_dirs


class Sweep:
    """The sweeps of one test's environment, driven from the outside.

    ``sweep_id`` picks one sweep of the environment's index (``None``: the newest one, as ``latest`` does); the
    readers (:meth:`record`, :meth:`rows`, :meth:`child_runs`) read that sweep.
    """

    def __init__(self, env: SweepsEnv, cwd: Path | None = None, sweep_id: str | None = None) -> None:
        self.env = env
        self.cwd = cwd or env.root
        self.sweep_id = sweep_id
        self.driver: subprocess.Popen[str] | None = None

    # -- running ---------------------------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 600, check: bool = False,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``python -m sweeps ARGS`` to its end; ``check``: fail the test, with its output, on a non-zero exit."""
        return self.env.run(*args, timeout=timeout, check=check, extra_env=extra_env, cwd=self.cwd)

    def run(self, *overrides: str, timeout: float = 600, check: bool = True,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``python -m sweeps run OVERRIDES`` to its end; the sweep it made becomes this one."""
        before = self.ids()
        proc = self.cli("run", *overrides, timeout=timeout, check=check, extra_env=extra_env)
        self._adopt(before)
        return proc

    def start(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """``python -m sweeps ARGS`` in its own session (so :meth:`kill` takes its process group), output piped."""
        self.driver = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=self.cwd,
                                       env={**self.env.env, **(extra_env or {})}, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, start_new_session=True)
        return self.driver

    def wait(self, timeout: float = 600) -> tuple[int, str]:
        """The started driver's exit code and output, once it ends."""
        assert self.driver is not None, "start() first"
        out, _ = self.driver.communicate(timeout=timeout)
        if self.sweep_id is None:
            self._adopt(set())
        return self.driver.returncode, out

    def python(self, code: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``python -c CODE`` in the environment (the Python API as a script or a notebook calls it)."""
        proc = subprocess.run([sys.executable, "-c", code], cwd=self.cwd, env=self.env.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"python -c exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
                                 f"--- stderr\n{proc.stderr[-6000:]}")
        return proc

    def said(self, code: str, mark: str = "PY ", timeout: float = 600) -> Any:
        """:meth:`python` of ``code``, which prints one line ``mark`` + JSON (what the API returned): that JSON."""
        (line,) = [x for x in self.python(code, timeout).stdout.splitlines() if x.startswith(mark)]
        return json.loads(line[len(mark):])

    def stop(self, now: bool = False, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``python -m sweeps stop ID [--now]``, from another process as an operator would."""
        return self.cli("stop", self.id, *(["--now"] if now else []), timeout=timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """``sig`` to the started driver's whole process group (SIGKILL: as a crash or an OOM kill would)."""
        assert self.driver is not None, "start() first"
        os.killpg(self.driver.pid, sig)

    @classmethod
    def only(cls, env: SweepsEnv, cwd: Path | None = None) -> Sweep:
        """The environment's one sweep (fails, naming what it holds, when it holds none or several)."""
        ids = cls(env).ids()
        assert len(ids) == 1, f"one sweep expected in {env.home / 'sweeps'}: {sorted(ids)}"
        return cls(env, cwd, sweep_id=next(iter(ids)))

    # -- reading -------------------------------------------------------------------------------------------
    def ids(self) -> set[str]:
        index = self.env.home / "sweeps"
        return {p.stem for p in index.glob("[!.]*.json")} if index.is_dir() else set()

    def _adopt(self, before: set[str]) -> None:
        new = sorted(self.ids() - before, key=lambda i: self._read(i).get("created") or 0)
        if new:
            self.sweep_id = new[-1]

    def _read(self, sweep_id: str) -> dict[str, Any]:
        return json.loads((self.env.home / "sweeps" / f"{sweep_id}.json").read_text())

    @property
    def id(self) -> str:
        if self.sweep_id is None:
            self._adopt(set())
        assert self.sweep_id, f"no sweep in {self.env.home / 'sweeps'}"
        return self.sweep_id

    def record(self) -> dict[str, Any]:
        """The sweep's index record (what ``sweeps list``/``report`` read)."""
        return self._read(self.id)

    def trial_dirs(self, key: str = "experiment_dirs") -> list[Path]:
        """Its trials' folders (``key="confirm_dirs"``: its confirmation re-runs')."""
        return [d for exp in self.record().get(key) or [] for d in trial_dirs(exp)]

    def rows(self, key: str = "experiment_dirs") -> dict[str, list[dict[str, Any]]]:
        """Each trial's result rows (Tune's ``result.json``), by trial id."""
        out: dict[str, list[dict[str, Any]]] = {}
        for d in self.trial_dirs(key):
            f = d / "result.json"
            rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.is_file() else []
            if rows:
                out[rows[0]["trial_id"]] = rows
        return out

    def client(self) -> Any:
        return mlflow_client(self.env.tracking_uri)

    def child_runs(self) -> list[Any]:
        """The MLflow runs nested under the sweep's parent run (its trials', its confirmation re-runs')."""
        rec = self.record()
        return self.client().search_runs([rec["mlflow_experiment_id"]],
                                         f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'", max_results=5000)

    def models(self, name: str) -> list[Any]:
        """The registered versions of model ``name``."""
        return list(self.client().search_model_versions(f"name = '{name}'"))

    def report(self, name: str = "summary.md") -> str:
        """A file of the sweep's report, under ``reports/<sweep name>/<sweep id>/``."""
        rec = self.record()
        default = self.cwd / "reports" / rec["experiment"] / self.id
        folder = Path(rec["report_dir"]) if rec.get("report_dir") else default
        return (folder / name).read_text()
