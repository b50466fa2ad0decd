"""What travels to a remote cluster's nodes with the sweep: the code and the settings (Ray's ``runtime_env``).

A node needs only the libraries (ray, torch, ...). The driver ships ``sweeps``, ``trainables`` and every
package that ``trainable.loop``/``builder``/``datasets``/``load_model`` point into (a user's own package
outside this repo too, a single-file module or a namespace package: :func:`sources`) as ``py_modules``,
without caches, local state or checkpoints. Settings the workers read go as ``env_vars``; credentials never
do (they would show in the job's runtime_env): a node gets those from its own environment (an instance role,
a Kubernetes secret).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from sweeps.config.spec import SweepSpec

log = logging.getLogger(__name__)

# Top-level packages the project depends on: installed on every node, never shipped.
DEPENDENCIES = {"ray", "torch", "mlflow", "optuna", "hyperopt", "hydra", "omegaconf", "pandas", "numpy",
                "matplotlib", "sklearn", "pyarrow", "transformers", "accelerate", "croniter", "filelock"}
ALWAYS = ("sweeps", "trainables")
# gitwildmatch patterns, matched at any depth of each shipped package: folders only (a trailing /), and never a
# name a package may use for code (``reports`` would drop ``sweeps/reports``, ``checkpoint_*`` a checkpoint_io.py).
EXCLUDES = ["__pycache__/", "*.pyc", ".git/", ".sweeps/", "checkpoint_*/", "*.egg-info/", ".pytest_cache/",
            ".mypy_cache/", ".ruff_cache/", "*.db", "mlruns/", "mlartifacts/"]
# Non-secret settings that Train workers and trial drivers read, passed on when the driver has them.
SETTINGS = ("SWEEPS_HOME", "SWEEPS_DATA_CACHE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION",
            "AWS_REGION", "MLFLOW_S3_ENDPOINT_URL", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def user_packages(spec: SweepSpec) -> list[str]:
    """Top-level packages the trainable's dotted paths point into, other than the project's dependencies."""
    t = spec.trainable
    paths = [t.loop, t.builder, t.datasets, getattr(t, "load_model", None)]
    tops = {p.replace(":", ".").split(".")[0] for p in paths if p}
    return sorted(n for n in tops if n not in DEPENDENCIES and n not in sys.stdlib_module_names and n not in ALWAYS)


def modules(spec: SweepSpec) -> list[str]:
    """What to ship, as ``py_modules`` paths. Paths, not module objects: inside a Ray Job, Ray deep-copies the
    driver's runtime_env to merge it with the job's, and a module object cannot be copied."""
    out: list[str] = []
    for name in (*ALWAYS, *user_packages(spec)):
        out += [p for p in sources(name) if p not in out]
    return out


def sources(name: str) -> list[str]:
    """The paths that make up the top-level module ``name`` where a node's ``sys.path`` should see them.

    Ray unpacks each ``py_modules`` entry into a folder of its own and puts that folder on the workers'
    ``PYTHONPATH``: a folder arrives as ``<folder name>/...``, a ``.py`` file as the file itself. So a package
    ships as its folder, a single-file module (``--from mymod:train``) as its ``.py`` file, and a namespace
    package (no ``__init__.py``, ``__file__`` None) as every folder of its ``__path__``, each named after the
    package, which Python joins again on the node. Ray would refuse a module object whose ``__path__`` has
    several folders.

    A module that is neither (compiled, or inside a zip) does not travel: it must be installed on the nodes.
    """
    module = importlib.import_module(name)
    found = getattr(module, "__path__", None)
    if found is not None:
        return [str(p) for p in dict.fromkeys(found) if os.path.isdir(p)]
    file = getattr(module, "__file__", None) or ""
    if file.endswith(".py") and os.path.isfile(file):
        return [file]
    log.warning("module %s (%s) is not shipped to the cluster's nodes: only packages and .py files travel; "
                "install it on every node", name, file or "no file")
    return []


def settings() -> dict[str, str]:
    return {k: os.environ[k] for k in SETTINGS if os.environ.get(k)}


def runtime_env(spec: SweepSpec, env_vars: dict[str, str]) -> dict[str, Any]:
    """The job-level ``runtime_env`` of a remote sweep (every Tune trial and Train worker inherits it).

    Inside a Ray Job (``ray job submit``, a KubeRay RayJob) Ray merges this with the job's own runtime_env and
    refuses any key or env var set on both sides (``ray.init`` raises "Failed to merge the Job's runtime
    env"); a job that passes ``SWEEPS_HOME`` or ``AWS_ENDPOINT_URL`` in its ``env_vars`` is the usual case.
    There the driver's values win (``RAY_OVERRIDE_JOB_RUNTIME_ENV=1``): they are the job's, made absolute.
    """
    os.environ.setdefault("RAY_OVERRIDE_JOB_RUNTIME_ENV", "1")  # Ray's documented switch; no effect outside a job
    out: dict[str, Any] = {"env_vars": {**settings(), **env_vars}}
    if spec.cluster.ship_code:
        out["py_modules"] = modules(spec)
        out["excludes"] = list(EXCLUDES)
    return out
