"""Warm processes for the next trial: the raylet prestarts them while trials run (a Ray internal, version-checked).

docs/ray.md, "Trial start-up". The raylet hands a new actor an idle process only when the process was started
for the same job and the same runtime env (the exact serialized string; ``""`` and ``"{}"`` are one), and
an actor's process exits with the actor, so every trial needs fresh ones: its Train controller, the
controller's synchronization actor, its workers, and its Tune trial actor unless Tune reuses one. Ray
prestarts idle processes only once, when the first driver connects. The raylet's ``PrestartWorkers`` call
(no public Python API; its generated gRPC stub, which carries the cluster's auth token) starts N processes
for a job and runtime env, kept idle for a bounded time: the sweep asks each node that runs its trials for
what one trial needs whenever a trial starts or ends, so the next trial's processes are already up.

On the embedded Ray those processes also import torch and Ray Train before they are needed
(``preload_python_modules``, a raylet setting given at ``ray.init``); importing torch does not touch CUDA
(Ray sets ``CUDA_VISIBLE_DEVICES`` when a process is leased, after that).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

KEEP_ALIVE_S = 60  # an unused warm process goes back after this long (the raylet ends it)
PRELOAD = ("torch", "torch.distributed", "ray.train.torch", "ray.tune")
RPC_TIMEOUT_S = 5.0


def raylet_settings() -> dict[str, Any]:
    """``_system_config`` for the embedded Ray: warm processes import torch and Ray Train before work."""
    return {"preload_python_modules": list(PRELOAD)}


def job_runtime_env() -> str:
    """The job's serialized runtime env: the string a prestarted process must carry to host its actors."""
    import ray

    worker: Any = ray._private.worker.global_worker
    info = worker.core_worker.get_job_config().runtime_env_info
    return info.serialized_runtime_env or "{}"


def _request(address: str, job_id: bytes, runtime_env: str, n: int, keep_alive_s: int) -> None:
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    channel = init_grpc_channel(address, asynchronous=False)
    try:
        stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)
        request: Any = node_manager_pb2.PrestartWorkersRequest()  # type: ignore[attr-defined]
        request.language = common_pb2.Language.Value("PYTHON")  # type: ignore[attr-defined]
        request.job_id = job_id
        request.runtime_env_info.serialized_runtime_env = runtime_env
        request.keep_alive_duration_secs = keep_alive_s
        request.num_workers = n
        stub.PrestartWorkers(request, timeout=RPC_TIMEOUT_S)
    finally:
        channel.close()


class Pool:
    """Asks the raylets for warm processes, off Tune's loop (a request is a gRPC round trip)."""

    def __init__(self, per_trial: int, keep_alive_s: int = KEEP_ALIVE_S) -> None:
        import ray

        self.per_trial = per_trial
        self.keep_alive_s = keep_alive_s
        self.job_id = bytes.fromhex(ray.get_runtime_context().get_job_id())
        self.runtime_env = job_runtime_env()
        self.requested = 0
        self.failed: str | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks into tuner.pkl
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def addresses(self, ips: set[str] | None = None) -> list[str]:
        import ray

        return [f"{n['NodeManagerAddress']}:{n['NodeManagerPort']}" for n in ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
                and (ips is None or n["NodeManagerAddress"] in ips)]

    def top_up(self, ips: set[str] | None = None) -> None:
        """Ask each node (those with these IPs, or every node with CPUs) for one trial's processes."""
        if self.failed:
            return
        threading.Thread(target=self._top_up, args=(ips,), name="sweeps-warm-pool", daemon=True).start()

    def _top_up(self, ips: set[str] | None) -> None:
        with self._lock:
            t0 = time.monotonic()
            try:
                for address in self.addresses(ips):
                    _request(address, self.job_id, self.runtime_env, self.per_trial, self.keep_alive_s)
                    self.requested += self.per_trial
            except Exception as exc:  # the call moved or the raylet refused: cold starts from now on
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("warm pool off: the raylet refused PrestartWorkers (%s); trials start cold", self.failed)
                return
            log.debug("asked for %d warm process(es) per node in %.3f s", self.per_trial, time.monotonic() - t0)


def pool_callback(pool: Pool) -> Any:
    """A Tune callback that tops the pool up on the trial's node whenever a trial starts or ends."""
    from ray.tune import Callback

    class TopUp(Callback):  # type: ignore[misc]
        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            pool.top_up(_node_ips(trial))

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            pool.top_up(_node_ips(trial))

    return TopUp()


def _node_ips(trial: Any) -> set[str] | None:
    ip = getattr(getattr(trial, "temporary_state", None), "location", None)
    ip = getattr(ip, "hostname", None)
    return {ip} if ip else None
