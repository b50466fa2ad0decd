"""Launch: every pre-flight check, then Ray started (or joined) and the MLflow store opened, side by side."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from sweeps import paths
from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput
from sweeps.execution.cluster import loopback, raystart, remote, versions
from sweeps.execution.resources import plan, storage
from sweeps.execution.tuning import keeper
from sweeps.ops.signals import shielded
from sweeps.tracking import client as mc

T = TypeVar("T")

BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def check_remote(spec: SweepSpec) -> None:
    """A multi-node sweep needs a tracking server every node can reach."""
    if spec.cluster.mode != "remote":
        return
    if spec.tracking.uri.startswith(("sqlite:", "file:")):
        raise BadInput(f"tracking.uri: {spec.tracking.uri!r} is a local store, but cluster=remote runs trials "
                       f"on other machines; start an MLflow server (mlflow server --backend-store-uri ... "
                       f"--host 0.0.0.0) and set tracking.uri=http://HOST:PORT")


def needs_rendezvous(spec: SweepSpec) -> bool:
    """Whether the sweep's trials form torch process groups (a worker group each): not where every trial
    trains in its own process (:func:`sweeps.execution.resources.plan.in_process`)."""
    return not plan.in_process(spec)


def listeners(spec: SweepSpec) -> str:
    """Where the sweep's processes listen: the record's and the parent run's line."""
    return loopback.listeners(spec.cluster.mode, rendezvous=needs_rendezvous(spec))


@contextmanager
def launched(spec: SweepSpec) -> Iterator[tuple[plan.Plan, Any]]:
    """Check everything that can be checked, start (or join) Ray, yield (plan, MLflow client); stop Ray.

    Order matters: the plan and the tracking/storage probes run before anything is written.
    """
    check_remote(spec)  # a settings error: said before any cluster is contacted
    local = spec.cluster.mode == "local"
    pre = plan.make_plan(spec, plan.local_resources(spec), local=True) if local else None
    if not local:
        raystart.enable_driver_auth()  # before Ray is imported where it can be: Ray reads the mode at import
        versions.check(spec.cluster.address or os.environ.get("RAY_ADDRESS"))  # Ray's and Python's, first
    if not local:
        remote.check_node_types(spec)
    mc.probe(spec.tracking.uri)
    storage.check_storage(spec.storage_path)
    # Ray's processes (and trainables that keep data under $SWEEPS_HOME) must see the same state folder.
    os.environ["SWEEPS_HOME"] = str(paths.home())
    custom = {k: v for k, v in pre.resources.total.items() if k not in BUILTIN_RESOURCES} if pre else None
    # Opening the MLflow store (import, SQLAlchemy engine, closing a dead driver's runs: ~1.5 s) overlaps
    # Ray's start-up, which mostly waits on its own processes; on the embedded Ray so does deciding the loopback
    # levers (the run's listeners line; the rendezvous lever's probe imports torch and Train's torch backend,
    # ~1.5 s on 2 cores, and only a sweep whose trials form worker groups asks it).
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="sweeps-launch") as pool:
        opening = pool.submit(_open_store, spec.tracking.uri)
        deciding = pool.submit(lambda: loopback.internals_missing(needs_rendezvous(spec))) if local else None
        raystart.start(spec, pre.num_cpus_to_start if pre else None, custom, pre.concurrent_trials if pre else 1)
    try:
        c = opening.result()
        if deciding is not None:
            deciding.result()
        the_plan = pre or remote.remote_plan(spec)
        if not local:
            storage.check_shared_storage(spec.storage_path)
        yield the_plan, c
    finally:
        stop_ray()


def stop_ray_while(work: Callable[[], T]) -> T:
    """Stop Ray on this thread while ``work`` runs on a helper thread; ``work``'s result (its error re-raised).

    The run pipeline draws its report this way while Ray's processes go (1-2 s). Ray's core worker ends the
    whole process when an ``ObjectRef`` or actor handle is released while it shuts down (the release calls into
    it; Ray logs "The core worker has already been shutdown ... The process will exit"): a notebook kernel died
    of it when Ray stopped on a helper thread and the sweep's frames let go of Tune's objects meanwhile. So the
    thread that holds the sweep's Ray objects stops Ray; garbage is collected first and Python's cyclic collector
    waits until Ray is down (a collection on the helper thread could release a reference held in a cycle);
    ``work`` must not touch Ray.
    """
    gc.collect()
    paused = gc.isenabled()
    gc.disable()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweeps-while-ray-stops") as pool:
            done = pool.submit(work)
            stop_ray()
            return done.result()
    finally:
        if paused:
            gc.enable()


def stop_ray() -> None:
    """Stop Ray; a signal meanwhile is noted, not raised.

    A second Ctrl-C cutting the shutdown short would leave Ray half-stopped as the interpreter exits: Ray's core
    worker then ends the process with status 1 instead of the 130 of an interrupted sweep."""
    with shielded("stopping Ray"):
        raystart.stop()
    keeper.after_ray_stopped()


def _open_store(uri: str) -> Any:
    try:
        c = mc.client(uri)
        mc.close_stale_runs(c)
    except Exception as exc:
        from sweeps.tracking.versions import schema_error

        err = schema_error(uri, exc)
        if err is None:
            raise
        raise err from None
    return c
