"""Where a sweep runs and writes: the ``tracking``, ``cluster``, ``storage``, ``checkpoint`` and ``failure``
sections."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sweeps import uris
from sweeps.config import redaction
from sweeps.config.reader import Reader
from sweeps.config.spec import ClusterCfg, FailureCfg, TrackingCfg

CLUSTER_MODES = ("local", "remote")
TRACKING_SCHEME = re.compile(r"^(sqlite|postgresql|mysql|mssql|https?|file|databricks)(\+\w+)?:")


def tracking(r: Reader, default_uri: str, sweep_name: Any) -> TrackingCfg:
    # The spec keeps the public form (no password); the real URI stays in this process (redaction.real_uri).
    uri = redaction.public_uri(r.get("tracking", "uri", "str", default=None) or default_uri)
    if not TRACKING_SCHEME.match(uri):
        r.errors.append(f"tracking.uri: {uri!r} has no supported scheme; use sqlite:///path/mlflow.db, "
                        f"http://HOST:PORT (an MLflow server), or a database URI")
    experiment = r.get("tracking", "experiment", "str", default=None) or sweep_name
    max_models = r.get("tracking", "max_models", "int", default=100)
    if isinstance(max_models, int) and max_models < 0:
        r.errors.append(f"tracking.max_models: must be >= 0 (the best N trials keep a model; 0: every trial), got "
                        f"{max_models}")
        max_models = 100
    return TrackingCfg(uri, experiment, bool(r.get("tracking", "log_checkpoints", "bool", default=True)),
                       float(r.get("tracking", "flush_interval_s", "num", default=2.0)), int(max_models or 0))


def cluster(r: Reader) -> ClusterCfg:
    mode = r.get("cluster", "mode", "str", default="local", choices=CLUSTER_MODES)
    address = r.get("cluster", "address", "str", default=None)
    num_cpus = r.get("cluster", "num_cpus", "num", default=None)
    num_gpus = r.get("cluster", "num_gpus", "num", default=None)
    driver_cpus = r.get("cluster", "driver_cpus", "num", default=1)
    hc = r.get("cluster", "health_check_interval_s", "num", default=0.1)
    wst = r.get("cluster", "worker_start_timeout_s", "num", default=120)
    to_driver = r.get("cluster", "log_to_driver", "bool", default=False)
    driver_res = r.amounts("cluster.driver_resources", r.get("cluster", "driver_resources", "map", default={}) or {})
    if isinstance(driver_cpus, int | float) and driver_cpus <= 0:
        r.errors.append(f"cluster.driver_cpus: must be > 0 (Tune rejects an empty driver), got {driver_cpus}")
    if num_cpus is not None and num_cpus <= 0:
        r.errors.append(f"cluster.num_cpus: must be > 0, got {num_cpus}")
    if isinstance(address, str) and address.startswith("ray://"):
        r.errors.append(f"cluster.address: {address!r} is a Ray Client address: it would run Tune on the cluster "
                        f"but tracking, storage checks and the results on this machine. Submit the sweep as a Ray "
                        f"Job instead: `ray job submit --address http://HEAD:8265 --working-dir . -- python -m "
                        f"sweeps run ... cluster=remote cluster.address=auto` (docs/cluster.md)")
    wait_s = r.get("cluster", "wait_for_resources_s", "num", default=600)
    if isinstance(wait_s, int | float) and wait_s < 0:
        r.errors.append(f"cluster.wait_for_resources_s: must be >= 0, got {wait_s}")
    types = r.get("cluster", "node_types", "list", default=[]) or []
    node_types = tuple(r.amounts(f"cluster.node_types[{i}]", t) if isinstance(t, Mapping) else {}
                       for i, t in enumerate(types))
    ship = r.get("cluster", "ship_code", "bool", default=True)
    head_mb = r.get("cluster", "head_memory_per_trial_mb", "num", default=600)
    if isinstance(head_mb, int | float) and head_mb < 0:
        r.errors.append(f"cluster.head_memory_per_trial_mb: must be >= 0 (0: the head's memory is not counted), "
                        f"got {head_mb}")
        head_mb = 0
    return ClusterCfg(mode, address, num_cpus, num_gpus, float(driver_cpus), float(hc), float(wst),
                      bool(to_driver), driver_res, node_types, float(wait_s), bool(ship), float(head_mb))


def storage(r: Reader, default_path: str) -> str:
    """A URI (``s3://bucket/prefix``, any pyarrow scheme) or a local folder, made absolute."""
    path: str = r.get("storage", "path", "str", default=None) or default_path
    scheme = path.split("://", 1)[0] if "://" in path else ""
    if scheme and not re.match(r"^[a-z][a-z0-9+.\-]*$", scheme):
        r.errors.append(f"storage.path: {path!r} has a malformed URI scheme; use a folder or s3://bucket/prefix")
    if redaction.uri_passwords(path):
        redaction.remember(redaction.uri_passwords(path))
        r.errors.append(f"storage.path: {redaction.redact_uri(path)!r} carries credentials (user:secret@, TOKEN@ or "
                        f"a secret query parameter), which Ray would write into its experiment state and the sweep "
                        f"index; give them through the environment instead (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                        f"GOOGLE_APPLICATION_CREDENTIALS)")
        return uris.normalize(redaction.redact_uri(path))
    return uris.normalize(path)


def checkpoint(r: Reader) -> int:
    keep = r.get("checkpoint", "num_to_keep", "int", default=2)
    if isinstance(keep, int) and keep < 1:
        r.errors.append(f"checkpoint.num_to_keep: must be >= 1, got {keep}")
    return int(keep) if isinstance(keep, int) else 2


def failure(r: Reader) -> FailureCfg:
    max_failures = r.get("failure", "max_failures", "int", default=1)
    worker_failures = r.get("failure", "worker_max_failures", "int", default=1)
    for key, v in (("failure.max_failures", max_failures), ("failure.worker_max_failures", worker_failures)):
        if isinstance(v, int) and v < -1:
            r.errors.append(f"{key}: must be >= -1 (-1 = retry forever), got {v}")
    preemptions = r.get("failure", "max_preemption_failures", "int", default=-1)
    if isinstance(preemptions, int) and preemptions < -1:
        r.errors.append(f"failure.max_preemption_failures: must be >= -1 (-1 = recover from every preemption, "
                        f"0 = none), got {preemptions}")
    grace = r.get("failure", "preemption_grace_s", "num", default=0.0)
    if isinstance(grace, int | float) and grace < 0:
        r.errors.append(f"failure.preemption_grace_s: must be a number of seconds >= 0, got {grace}")
    return FailureCfg(max_failures, worker_failures, int(preemptions) if isinstance(preemptions, int) else -1,
                      float(grace) if isinstance(grace, int | float) and grace >= 0 else 0.0)


def unknown_sections(cfg: Mapping[str, Any], known: tuple[str, ...]) -> list[str]:
    unknown = sorted(set(cfg) - set(known) - {"hydra", "experiment"})
    if not unknown:
        return []
    return [f"unknown top-level section(s) {', '.join(unknown)}; known: {', '.join(known)}"]
