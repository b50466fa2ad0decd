"""A driver must run its cluster's Ray (and Python): both versions checked before anything starts.

Ray refuses a driver whose Ray or Python version differs from its cluster's, but only once it has connected,
with a bare ``RuntimeError`` traceback. So ``cluster=remote`` runs, their ``--dry-run`` and ``doctor
--address`` read the cluster's versions first (the ``cluster_version`` lever: its GCS), and where that is off
they read them from Ray's own error: either way one line names both versions and the two ways out (this Ray
in the driver's environment, or the driver submitted to the cluster as a Ray Job), and the run exits 2.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
from dataclasses import dataclass

PYTHON_MATCH = "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"  # Ray's own setting: "patch" (its default) or "minor"
ERROR = re.compile(r"Version mismatch: The cluster was started with:\s*Ray: (?P<ray>\S+)\s*Python: (?P<py>\S+)")


@dataclass(frozen=True)
class Versions:
    ray: str
    python: str


def here() -> Versions:
    import ray

    return Versions(ray.__version__, platform.python_version())


def compatible(cluster: Versions, mine: Versions) -> bool:
    """As Ray decides: the same Ray, and the same Python to the patch (or the minor, if Ray is told so)."""
    level = os.environ.get(PYTHON_MATCH, "patch")
    py_same = cluster.python.split(".")[:2] == mine.python.split(".")[:2] if level == "minor" else \
        cluster.python == mine.python
    return cluster.ray == mine.ray and py_same


def gcs_address(address: str | None) -> str | None:
    """The ``HOST:PORT`` of a cluster's GCS for an explicit ``cluster.address`` (``auto`` and Ray Client
    addresses are left to Ray's own check)."""
    if not address or address == "auto" or "://" in address:
        return None
    return address if ":" in address else f"{address}:6379"


def read(address: str | None) -> Versions | None:
    """The cluster's versions, read before connecting (the ``cluster_version`` lever), or None."""
    from sweeps.execution.levers import cluster_version, core

    gcs = gcs_address(address)
    if gcs is None or not core.applies(cluster_version.LEVER):
        return None
    meta = cluster_version.read(gcs)
    return Versions(str(meta["ray_version"]), str(meta.get("python_version", ""))) if meta else None


def from_error(exc: BaseException) -> Versions | None:
    """The cluster's versions named in Ray's own "Version mismatch" error, or None for any other error."""
    m = ERROR.search(str(exc))
    return Versions(m["ray"], m["py"]) if m else None


def message(address: str, cluster: Versions, mine: Versions | None = None) -> str:
    """One line: both versions and the two ways out, with the exact commands."""
    mine = mine or here()
    host = address.split("://")[-1].rsplit(":", 1)[0]
    argv = sys.argv[1:]
    args = " ".join(shlex.quote(a) for a in argv) if argv[:1] in (["run"], ["resume"], ["extend"]) else \
        "run +experiment=NAME cluster=remote cluster.address=auto"
    args = re.sub(r"cluster\.address=\S+", "cluster.address=auto", args)
    return (f"cluster.address: the cluster at {address} runs Ray {cluster.ray} on Python {cluster.python}, this "
            f"driver Ray {mine.ray} on Python {mine.python}; a driver must run its cluster's versions: install "
            f"them here (python {cluster.python} with pip install 'ray[default,tune,train]=={cluster.ray}'), or "
            f"submit the driver to the cluster as a Ray Job: ray job submit --address http://{host}:8265 "
            f"--working-dir . -- python -m sweeps {args}")


def check(address: str | None) -> None:
    """BadInput (exit 2) when the cluster at ``address`` runs other versions than this driver."""
    from sweeps.errors import BadInput

    cluster = read(address)
    if cluster is not None and not compatible(cluster, here()):
        raise BadInput(message(str(address), cluster))
