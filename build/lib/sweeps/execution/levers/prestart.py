"""Lever ``prestart``: the raylet's ``PrestartWorkers`` call, so warm processes wait for the next trial.

Ray prestarts idle processes only once, when the first driver connects; its raylet's ``PrestartWorkers`` gRPC
call (no public Python API; the generated stub, over Ray's private channel helper that carries the cluster's
auth token) starts N more for a job and runtime env. The job's serialized runtime env (the exact string a
prestarted process must carry to host the job's actors) is read from the driver's core worker, also private.
Fallback: no pool; every trial start waits for fresh processes (docs/ray.md, "Trial start-up").
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, first, has, importable

RPC_TIMEOUT_S = 5.0


def _probe() -> str | None:
    if problem := importable(("ray._private.grpc_utils", "ray.core.generated.node_manager_pb2",
                              "ray.core.generated.node_manager_pb2_grpc", "ray._private.worker")):
        return problem
    import ray._private.worker
    from ray._private import grpc_utils
    from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

    request = getattr(node_manager_pb2, "PrestartWorkersRequest", None)
    if request is None:
        return "the raylet has no PrestartWorkers call"
    fields = set(request.DESCRIPTOR.fields_by_name)
    wanted = {"language", "job_id", "runtime_env_info", "keep_alive_duration_secs", "num_workers"}
    return first(has(grpc_utils, "init_grpc_channel"), has(node_manager_pb2_grpc, "NodeManagerServiceStub"),
                 has(ray._private.worker, "global_worker"),
                 None if wanted <= fields else f"PrestartWorkersRequest lacks {', '.join(sorted(wanted - fields))}")


LEVER = Lever(name="prestart", package="ray", checked=("2.60.",),
              what="warm processes prestarted for the trials about to start (the raylet's PrestartWorkers)",
              fallback="no process pool: each trial start waits for fresh processes", probe=_probe)


def job_runtime_env() -> str:
    """The job's serialized runtime env: the string a prestarted process must carry to host its actors."""
    import ray._private.worker

    worker: Any = ray._private.worker.global_worker
    info = worker.core_worker.get_job_config().runtime_env_info
    return info.serialized_runtime_env or "{}"


def request(address: str, job_id: bytes, runtime_env: str, n: int, keep_alive_s: int) -> None:
    """Ask the raylet at ``address`` for ``n`` idle processes of this job and runtime env."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    channel = init_grpc_channel(address, asynchronous=False)
    try:
        stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)
        req: Any = node_manager_pb2.PrestartWorkersRequest()  # type: ignore[attr-defined]
        req.language = common_pb2.Language.Value("PYTHON")  # type: ignore[attr-defined]
        req.job_id = job_id
        req.runtime_env_info.serialized_runtime_env = runtime_env
        req.keep_alive_duration_secs = keep_alive_s
        req.num_workers = n
        stub.PrestartWorkers(req, timeout=RPC_TIMEOUT_S)
    finally:
        channel.close()
