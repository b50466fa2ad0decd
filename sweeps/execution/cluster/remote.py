"""The plan on a remote cluster: refuse what no node type can hold, wait for nodes that can, then go elastic.

A cluster may start with a 0-CPU head and no workers (KubeRay, ``ray up``): nodes arrive once work asks for
them. So instead of refusing what the nodes alive at launch cannot hold, the sweep asks the autoscaler for one
trial's worth (Ray's ``request_resources``) and waits, saying what it waits for, up to
``cluster.wait_for_resources_s``. Only a trial that no configured node type (``cluster.node_types``) could ever
hold is refused before launch. Concurrency then follows the live cluster (:mod:`sweeps.execution.run.concurrency`).
"""

from __future__ import annotations

import logging
import os
import time

from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput, SweepsError
from sweeps.execution.cluster import shipping
from sweeps.execution.resources.plan import (
    Plan,
    Resources,
    _fmt,
    cluster_resources,
    in_process,
    make_plan,
    per_trial,
    total_trials,
    worker_bundle,
    workers,
)

log = logging.getLogger(__name__)
POLL_S = 2.0
SAY_EVERY_S = 10.0


class NoCapacity(SweepsError):
    """The cluster did not grow to hold one trial within ``cluster.wait_for_resources_s``."""


def check_node_types(spec: SweepSpec) -> None:
    """BadInput when ``cluster.node_types`` is given and none of them can hold one worker."""
    types, bundle = spec.cluster.node_types, worker_bundle(spec)
    if types and not any(all(t.get(k, 0.0) >= v for k, v in bundle.items()) for t in types):
        shapes = "; ".join(_fmt(t) for t in types)
        raise BadInput(f"trainable.resources_per_worker: a worker needs {_fmt(bundle)} but no node type of "
                       f"cluster.node_types can hold it ({shapes}); lower trainable.resources_per_worker or "
                       f"use_gpu, or add a node type")


def shape(spec: SweepSpec) -> str:
    """What a trial is made of, in words: its own process, or its driver and workers."""
    if in_process(spec):
        return "in the trial's own process"
    return f"driver + {workers(spec)} workers x {_fmt(worker_bundle(spec))}"


def holds_a_trial(spec: SweepSpec, res: Resources) -> bool:
    bundle, need = worker_bundle(spec), per_trial(spec)
    fits_worker = any(all(n.get(k, 0.0) >= v for k, v in bundle.items()) for n in res.nodes)
    return fits_worker and all(res.total.get(k, 0.0) >= v for k, v in need.items())


def _request_one_trial(spec: SweepSpec) -> None:
    try:
        from ray.autoscaler.sdk import request_resources

        bundle = worker_bundle(spec)
        driver = {"CPU": spec.cluster.driver_cpus, **spec.cluster.driver_resources}
        request_resources(bundles=[per_trial(spec)] if in_process(spec) else [driver, *[bundle] * workers(spec)])
    except Exception as exc:  # no autoscaler (a fixed cluster): the nodes may still join by hand
        log.debug("request_resources failed: %s", exc)


def wait_for_capacity(spec: SweepSpec, timeout_s: float | None = None) -> Resources:
    """The cluster's resources once it can hold one trial; says what it waits for every few seconds.

    Raises:
        NoCapacity: after ``cluster.wait_for_resources_s`` without room for one trial.
    """
    timeout = spec.cluster.wait_for_resources_s if timeout_s is None else timeout_s
    need = per_trial(spec)
    start = time.monotonic()
    said = -SAY_EVERY_S
    requested = False
    while True:
        res = cluster_resources()
        if holds_a_trial(spec, res):
            return res
        waited = time.monotonic() - start
        if not requested:
            _request_one_trial(spec)
            requested = True
        if waited >= timeout:
            raise NoCapacity(f"the cluster cannot hold one trial after {waited:.0f} s: need {_fmt(need)} "
                             f"({shape(spec)}), cluster "
                             f"has {_fmt(res.total)} over {len(res.nodes)} node(s); add nodes, or raise "
                             f"cluster.wait_for_resources_s")
        if waited - said >= SAY_EVERY_S:
            log.info("waiting for resources: need %s (%s), cluster has %s over %d node(s)",
                     _fmt(need), shape(spec), _fmt(res.total), len(res.nodes))
            said = waited
        time.sleep(POLL_S)


def remote_plan(spec: SweepSpec) -> Plan:
    """A plan for a remote cluster (call after ``ray.init``): its concurrency is what the cluster holds now."""
    check_node_types(spec)
    res = wait_for_capacity(spec)
    return make_plan(spec, res, local=False, cleaner=starts_cleaner(spec))


def starts_cleaner(spec: SweepSpec) -> bool:
    """Whether each trial's Train run starts Ray's per-run placement-group cleaner (on the head): a trial with
    a worker group on Train's own trainer. A trial in its own process runs Train's local mode, which starts
    none; the lean trainer leaves it out, unless Train would add variables to its processes' environment (the
    trial then takes Train's own path, :func:`sweeps.execution.train.trial.trainer_class`)."""
    if in_process(spec):
        return False
    if not _lean():
        return True
    import ray

    from sweeps.execution.levers import lean_trainer

    job_env = dict((ray.get_runtime_context().runtime_env or {}).get("env_vars") or {})
    return bool(lean_trainer.added_env(job_env))


DASHBOARD_PORT = 8265


def dashboard_url(address: str | None) -> str | None:
    """Where a cluster's dashboard (and State API) would answer: ``$RAY_API_SERVER_ADDRESS``, else the head
    named by ``address`` (``HOST:6379``, ``ray://HOST:10001``, ``http://HOST:8265``) on port 8265."""
    if os.environ.get("RAY_API_SERVER_ADDRESS"):
        return os.environ["RAY_API_SERVER_ADDRESS"]
    if not address or address == "auto":
        return None
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    host = address.split("://")[-1].rsplit(":", 1)[0]
    return f"http://{host}:{DASHBOARD_PORT}"


def state_api(address: str | None, lean: bool, timeout_s: float = 3.0) -> tuple[bool | None, str]:
    """Whether the cluster's State API answers (None: no address to ask), and what a sweep does either way."""
    import urllib.error
    import urllib.request

    url = dashboard_url(address)
    without = ("without it the sweep frees its trials' placement groups itself (named groups, Ray's public "
               "calls)" if lean else "on this Ray the sweep's lean trainer is off: Train's own cleaner needs "
               "the State API, so without it a stopped trial's workers keep their CPUs until the sweep ends; "
               "the stall watchdog says so")
    if url is None:
        return None, f"not checked (cluster.address is {address or 'unset'}); {without}"
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=timeout_s):
            pass
    except urllib.error.HTTPError as exc:  # 401/403: it answers, and wants the cluster's token
        return True, f"answers at {url} (HTTP {exc.code}: it wants the token); {without}"
    except (OSError, ValueError) as exc:
        return False, f"no answer at {url} ({exc}); {without}"
    return True, f"answers at {url}; {without}"


def versions_line(address: str | None) -> str:
    """The cluster's Ray and Python, read once before anything starts; BadInput on a mismatch (the dry run
    fails as the run would), the reason in the line when nothing answered."""
    from sweeps.execution.cluster import raystart, versions

    try:
        raystart.enable_driver_auth()
        cluster = versions.check(address)
    except versions.Unread as exc:
        return f"not read: {exc}"
    return f"Ray {cluster.ray}, Python {cluster.python}: the same as this driver's"


def describe(spec: SweepSpec) -> str:
    """The remote plan as ``--dry-run`` prints it (nothing is started; node types are checked).

    Raises:
        BadInput: when no node type of ``cluster.node_types`` can hold a worker.
    """
    check_node_types(spec)
    seen = versions_line(spec.cluster.address or os.environ.get("RAY_ADDRESS"))
    cap, total = spec.sweep.max_concurrent_trials, total_trials(spec)
    types = "; ".join(_fmt(t) for t in spec.cluster.node_types) or "not given (whatever nodes join)"
    shipped = (", ".join([*shipping.ALWAYS, *shipping.user_packages(spec)]) + " (runtime_env py_modules)"
               if spec.cluster.ship_code else "nothing (cluster.ship_code=false: the nodes' image holds the code)")
    return "\n".join([
        f"per trial      : {_fmt(per_trial(spec))} ({shape(spec)})",
        f"cluster        : {spec.cluster.address or '$RAY_ADDRESS'}; node types: {types}",
        f"versions       : {seen}",
        f"concurrent     : as many trials as the live cluster holds{f', at most {cap}' if cap else ''} "
        f"(recomputed as nodes join and go; paused trials do not count)",
        f"head memory    : {head_line(spec)}",
        f"waiting        : up to {spec.cluster.wait_for_resources_s:g} s for room for one trial "
        f"(cluster.wait_for_resources_s)",
        f"total trials   : {'unbounded (until the time budget)' if total is None else total}",
        f"code shipped   : {shipped}",
        f"state API      : {state_api(spec.cluster.address or os.environ.get('RAY_ADDRESS'), _lean())[1]}",
    ])


def head_line(spec: SweepSpec) -> str:
    """What the head's memory does to concurrency, in words (the run reads the head's memory once joined)."""
    mb = spec.cluster.head_memory_per_trial_mb
    if in_process(spec):
        return "not counted: a trial in its own process starts no placement-group cleaner"
    if not mb:
        return "not counted (cluster.head_memory_per_trial_mb=0)"
    cap = (f"concurrency capped at the head's memory / {mb:g} MB per trial (Train's per-run placement-group "
           "cleaner runs on the head; cluster.head_memory_per_trial_mb)")
    if _lean():
        return (f"not counted: the lean trainer starts no placement-group cleaner (on Train's own trainer: at most "
                f"the head's memory / {mb:g} MB per trial)")
    return cap


def _lean() -> bool:
    from sweeps.execution.warmstart import warm

    return warm.levers(local=False).lean
