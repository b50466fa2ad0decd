"""What travels to a remote cluster's nodes with the sweep: the code and the settings (Ray's ``runtime_env``).

A node needs only the libraries (ray, torch, ...). The driver ships ``sweeps``, ``trainables`` and every
package that ``trainable.loop``/``builder``/``datasets``/``load_model`` point into (a user's own package
outside this repo too) as ``py_modules``, without caches, local state or checkpoints. Settings the workers
read go as ``env_vars``; credentials never do (they would show in the job's runtime_env): a node gets
those from its own environment (an instance role, a Kubernetes secret).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from sweeps.config.spec import SweepSpec

# Top-level packages the project depends on: installed on every node, never shipped.
DEPENDENCIES = {"ray", "torch", "mlflow", "optuna", "hyperopt", "hydra", "omegaconf", "pandas", "numpy",
                "matplotlib", "sklearn", "pyarrow", "transformers", "accelerate", "croniter", "filelock"}
ALWAYS = ("sweeps", "trainables")
EXCLUDES = ["__pycache__", "*.pyc", ".git", ".sweeps", "reports", "checkpoint_*", "*.egg-info", ".pytest_cache",
            ".mypy_cache", ".ruff_cache", "*.db", "mlruns", "mlartifacts"]
# Non-secret settings that Train workers and trial drivers read, passed on when the driver has them.
SETTINGS = ("SWEEPS_HOME", "SWEEPS_DATA_CACHE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION",
            "AWS_REGION", "MLFLOW_S3_ENDPOINT_URL", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def user_packages(spec: SweepSpec) -> list[str]:
    """Top-level packages the trainable's dotted paths point into, other than the project's dependencies."""
    t = spec.trainable
    paths = [t.loop, t.builder, t.datasets, getattr(t, "load_model", None)]
    tops = {p.replace(":", ".").split(".")[0] for p in paths if p}
    return sorted(n for n in tops if n not in DEPENDENCIES and n not in sys.stdlib_module_names and n not in ALWAYS)


def modules(spec: SweepSpec) -> list[Any]:
    """The package modules to ship (Ray packs a module object's folder)."""
    return [importlib.import_module(name) for name in (*ALWAYS, *user_packages(spec))]


def settings() -> dict[str, str]:
    return {k: os.environ[k] for k in SETTINGS if os.environ.get(k)}


def runtime_env(spec: SweepSpec, env_vars: dict[str, str]) -> dict[str, Any]:
    """The job-level ``runtime_env`` of a remote sweep (every Tune trial and Train worker inherits it)."""
    out: dict[str, Any] = {"env_vars": {**settings(), **env_vars}}
    if spec.cluster.ship_code:
        out["py_modules"] = modules(spec)
        out["excludes"] = list(EXCLUDES)
    return out
