"""Lever ``cluster_version``: a running cluster's Ray and Python versions, read from its GCS before connecting.

The head writes them into the GCS key-value store when it starts (Ray's cluster metadata), and ``ray.init``
compares them with its own only after it has connected. Reading them first needs Ray's private GCS client
and usage-stats helper. Fallback: a throwaway ``ray.init`` in a child process, whose refusal (Ray's own "Version
mismatch" error) names both versions (:mod:`sweeps.execution.cluster.versions`).
"""

from __future__ import annotations

import threading
from typing import Any

from sweeps.execution.levers.core import Lever, binds, first, has, importable, source_says

# Ray's own code that makes the call this lever makes (GcsClient is compiled: it carries no signature)
GCS_CALLER = "ray.autoscaler._private.monitor"
FIELDS_READER = "ray._private.utils"  # Ray's own version check reads the metadata's fields by these names


def check(usage_lib: Any) -> str | None:
    """Ray's usage helper takes the call :func:`read` makes: ``get_cluster_metadata(gcs_client)``."""
    return first(has(usage_lib, "get_cluster_metadata"),
                 binds(getattr(usage_lib, "get_cluster_metadata", None), object()))


def _probe() -> str | None:
    if problem := importable(("ray._raylet", "ray._common.usage.usage_lib")):
        return problem
    import ray._raylet
    from ray._common.usage import usage_lib

    return first(has(ray._raylet, "GcsClient"), check(usage_lib), source_says(GCS_CALLER, "GcsClient(address="),
                 source_says(FIELDS_READER, '["ray_version"]', '["python_version"]'))


LEVER = Lever(name="cluster_version", package="ray", checked=("2.60.",),
              what="a cluster's Ray and Python versions read from its GCS before the driver connects",
              fallback="the versions come from a throwaway ray.init in a child process (Ray's own version check)",
              probe=_probe)


def read(address: str, timeout_s: float = 8.0) -> dict[str, Any] | None:
    """The cluster metadata (``ray_version``, ``python_version``, ...) of the GCS at ``HOST:PORT``; ``{"error":
    ...}`` when it refused (its token), None when it does not answer within ``timeout_s`` (or wrote none)."""
    out: dict[str, Any] = {}

    def ask() -> None:
        from ray._common.usage import usage_lib
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        try:
            out.update(usage_lib.get_cluster_metadata(GcsClient(address=address)) or {})
        except Exception as exc:  # unreachable, refused, no metadata: the caller decides
            out["error"] = f"{type(exc).__name__}: {exc}"

    helper = threading.Thread(target=ask, name="sweeps-cluster-version", daemon=True)
    helper.start()
    helper.join(timeout_s)
    return out if out.get("ray_version") or out.get("error") else None
