"""The plan step: size the run from the cluster's resources so trials can never wait forever for workers.

Pure functions over a :class:`Resources` snapshot; :func:`local_resources` and :func:`cluster_resources`
produce one. A trial holds its driver (``cluster.driver_cpus``) plus ``num_workers`` worker bundles that the
Train controller reserves in its own placement group, invisible to Tune: so concurrency is limited here, not
by Tune.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import sys
from dataclasses import dataclass, field, replace

from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput

log = logging.getLogger(__name__)

# Local mode: each trial's driver holds one of these, and the local Ray has as many as trials may run at once.
# Concurrency is then a resource, not a count: a trial that a scheduler pauses (HyperBand, PBT) gives its slot
# back, where Tune's count-based limits would keep counting it and deadlock the sweep.
TRIAL_SLOT = "sweeps_trial_slot"
# The embedded local Ray never schedules more than this many logical CPUs per core (unless cluster.num_cpus).
OVERSUBSCRIPTION = 4
HEAD = "node:__internal_head__"  # the resource Ray gives the head node only (ray._common.constants)
MB, GIB = 1024.0 ** 2, 1024.0 ** 3


@dataclass(frozen=True)
class Resources:
    """Total logical resources and the shapes of the nodes (each a dict like ``{"CPU": 4, "GPU": 1}``);
    ``head_memory``: the head node's ``memory`` resource in bytes (a cluster's snapshot; None where unknown)."""

    total: dict[str, float]
    nodes: tuple[dict[str, float], ...] = field(default_factory=tuple)
    head_memory: float | None = None
    note: str = ""  # what the snapshot assumed (a dry run's GPU on a machine that shows none)


@dataclass(frozen=True)
class Plan:
    per_trial: dict[str, float]
    worker_bundle: dict[str, float]
    concurrent_trials: int
    total_trials: int | None  # None: unbounded (time budget)
    max_epochs: int | None
    resources: Resources
    num_cpus_to_start: float | None  # local mode: logical CPUs for ray.init
    data_cpus: float = 0.0
    workers: int = 1  # Train workers per trial start; 0: the loop runs in the trial's own process
    pack: int = 1  # single-worker trials per GPU (trainable.pack)
    head_cap: int | None = None  # the trials the head's memory holds of Train's per-run cleaners (None: no cap)
    fit: tuple[str, int] | None = None  # (resource, trials it allows), when the head's memory caps lower
    head_per_trial_mb: float = 0.0  # what the cap counted per trial (cluster.head_memory_per_trial_mb)

    def describe(self) -> str:
        total = "unbounded (until the time budget)" if self.total_trials is None else str(self.total_trials)
        data = " + Ray Data tasks" if self.data_cpus else ""
        shape = (f"in the trial's own process, reused for the next trial{data}" if not self.workers else
                 f"driver + {self.workers} worker(s) x {_fmt(self.worker_bundle)}{data}")
        lines = [
            f"per trial      : {_fmt(self.per_trial)} ({shape})",
            f"cluster        : {_fmt(self.resources.total)} over {len(self.resources.nodes) or 1} node(s)",
            f"concurrent     : {self.concurrent_trials} trial(s) at a time{self._capped()}",
            f"total trials   : {total}",
            f"max epochs     : {self.max_epochs if self.max_epochs is not None else '?'} per trial",
        ]
        if self.pack > 1:
            lines.insert(1, f"packing        : {self.pack} trials per GPU, each capped at {100 / self.pack:.0f}% "
                            "of its memory")
        if self.resources.note:
            lines.insert(2, f"GPUs           : {self.resources.note}")
        if self.num_cpus_to_start is not None:
            lines.append(f"local Ray      : num_cpus={self.num_cpus_to_start:g} logical CPUs on "
                         f"{os.cpu_count()} cores")
        return "\n".join(lines)

    def _capped(self) -> str:
        if self.fit is None or self.resources.head_memory is None:
            return ""
        name = {"CPU": "CPUs", "GPU": "GPUs"}.get(self.fit[0], self.fit[0])
        return (f" (the head's memory caps it: {self.resources.head_memory / GIB:.1f} GiB / "
                f"{self.head_per_trial_mb:g} MB per trial; {name} would allow {self.fit[1]})")


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items()) if v) or "nothing"


def worker_bundle(spec: SweepSpec) -> dict[str, float]:
    t = spec.trainable
    bundle = {k.upper() if k.lower() in ("cpu", "gpu") else k: float(v) for k, v in
              t.resources_per_worker.items()}
    bundle.setdefault("CPU", 1.0)
    if t.use_gpu:
        bundle["GPU"] = 1.0 / t.pack if t.pack > 1 else bundle.get("GPU") or 1.0
    return {k: v for k, v in bundle.items() if v}


def in_process(spec: SweepSpec) -> bool:
    """Whether each trial's loop runs in the trial's own process (Train's local mode; the process is reused for
    the next trial): asked for (``num_workers=0``, ``in_process=true``) or, by default, a 1-worker CPU trial that
    is not a script. Where the ``local_train`` lever does not apply to the installed Ray (said once), a worker
    group of one worker instead."""
    t = spec.trainable
    wanted = t.num_workers == 0 or t.in_process is True or (
        t.in_process is None and t.num_workers == 1 and not t.use_gpu and not t.script)
    if not wanted:
        return False
    from sweeps.execution.levers import core, local_train

    return core.applies(local_train.LEVER)


def workers(spec: SweepSpec) -> int:
    """The Train workers each trial starts: none for a trial in its own process."""
    return 0 if in_process(spec) else max(1, spec.trainable.num_workers)


def per_trial(spec: SweepSpec) -> dict[str, float]:
    """What one trial holds: its driver plus its workers, or, in its own process, one bundle (the worker's
    resources, at least the driver's CPUs)."""
    if in_process(spec):
        need = dict(worker_bundle(spec))
        need["CPU"] = max(need.get("CPU", 0.0), spec.cluster.driver_cpus)
    else:
        need = {k: v * workers(spec) for k, v in worker_bundle(spec).items()}
        need["CPU"] = need.get("CPU", 0.0) + spec.cluster.driver_cpus
    for k, v in spec.cluster.driver_resources.items():
        need[k] = need.get(k, 0.0) + v
    if spec.trainable.datasets:
        # Ray Data's read/split tasks need a CPU outside the workers' reservation, or the first epoch hangs.
        need["CPU"] += 1.0
    return need


def grid_size(spec: SweepSpec) -> int:
    n = 1
    for s in spec.space.values():
        if s["dist"] == "grid" or (s["dist"] == "choice" and spec.searcher_name == "grid"):
            n *= len(s["values"])
    return n


def total_trials(spec: SweepSpec) -> int | None:
    if spec.sweep.num_samples == -1:
        return None
    return spec.sweep.num_samples * grid_size(spec)


def local_resources(spec: SweepSpec, dry_run: bool = False) -> Resources:
    """What the embedded local Ray will have: enough logical CPUs for the planned concurrency (``dry_run``: a
    GPU sweep on a machine that shows no GPU is planned for one, and the plan says so; a run is refused).

    Logical CPUs are scheduling tokens; oversubscribing a small box (2 trials x (1 + 2 workers) = 6 on 2
    cores) is what lets a data-parallel sweep run at all there.
    """
    need = per_trial(spec)
    conc = spec.sweep.max_concurrent_trials or max(1, (os.cpu_count() or 1) // max(1, math.ceil(need["CPU"])))
    total_t = total_trials(spec)
    if total_t is not None:
        conc = min(conc, total_t)
    if spec.cluster.num_cpus is None:
        conc = _within_bound(need["CPU"], conc)
    # One trial's worth of spare CPU tokens: a stopped trial's worker placement group is released
    # asynchronously (Ray's cleaner), and the next trial's workers must not starve meanwhile. Concurrency stays
    # capped by the trial-slot resource, not by CPU tokens.
    cpus = spec.cluster.num_cpus if spec.cluster.num_cpus is not None else need["CPU"] * (conc + 1)
    gpus = spec.cluster.num_gpus if spec.cluster.num_gpus is not None else _visible_gpus()
    note = ""
    if dry_run and not gpus and need.get("GPU"):
        gpus, note = 1.0, ("planned for 1: this machine shows none (a run here is refused; cluster.num_gpus=N "
                           "plans for N)")
    total = {"CPU": float(cpus), "GPU": float(gpus)}
    for k, v in need.items():  # custom resources (e.g. memory) are declared by the user's cluster
        if k not in total:
            total[k] = v * conc
    return Resources(total=total, nodes=(dict(total),), note=note)


def cores() -> int:
    """The cores this process may use (its CPU affinity, which a container's quota also narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _within_bound(trial_cpus: float, conc: int) -> int:
    """The concurrency the embedded Ray may run on this machine without thrashing.

    Logical CPUs may exceed cores (a data-parallel trial on a 2-core box needs it), but at most
    ``OVERSUBSCRIPTION`` times: a trial that needs more is refused, and concurrency is lowered to fit.
    """
    bound = OVERSUBSCRIPTION * cores()
    if trial_cpus > bound:
        raise BadInput(f"trainable.num_workers: one trial needs {trial_cpus:g} CPUs (driver + workers) but this "
                       f"machine has {cores()} core(s); the embedded Ray runs at most {OVERSUBSCRIPTION}x its "
                       f"cores ({bound:g} logical CPUs) so the machine does not thrash. Lower "
                       f"trainable.num_workers or trainable.resources_per_worker.CPU, or set cluster.num_cpus=N to "
                       f"take the risk")
    fit = max(1, int(bound // trial_cpus))
    if conc > fit:
        log.warning("running %d trial(s) at a time instead of %d: %d x %g CPUs would exceed %dx the %d core(s) "
                    "(set cluster.num_cpus to override)", fit, conc, conc, trial_cpus, OVERSUBSCRIPTION, cores())
    return min(conc, fit)


GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")  # NVIDIA, ROCm, WSL's GPU (what CUDA/HIP open)


def _visible_gpus() -> float:
    """The GPUs torch sees here (``torch.cuda.device_count()``, which honours ``CUDA_VISIBLE_DEVICES``). On a
    machine with no GPU device node at all, 0 without importing torch: the import is ~1.5 s of the driver's
    start on 2 cores, and the driver needs torch for nothing else (its trials import it in their own
    processes)."""
    if "torch" not in sys.modules and not _gpu_device_nodes():
        return 0.0
    try:
        import torch

        return float(torch.cuda.device_count())
    except Exception:  # torch missing or broken CUDA: plan as CPU-only
        return 0.0


def _gpu_device_nodes() -> bool:
    """Whether a GPU driver's device node exists (Linux); where /dev cannot tell (another OS), True: ask torch."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/dev"):
        return True
    return any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES)


def cluster_resources() -> Resources:
    """Snapshot of a connected Ray cluster (call after ``ray.init``)."""
    import ray

    alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    nodes = tuple({k: float(v) for k, v in n.items() if not k.startswith("node:")} for n in alive)
    head = next((float(n.get("memory", 0.0)) for n in alive if HEAD in n), None)
    return Resources(total={k: float(v) for k, v in ray.cluster_resources().items()
                            if not k.startswith("node:")}, nodes=nodes, head_memory=head)


def make_plan(spec: SweepSpec, res: Resources, local: bool, cleaner: bool = False) -> Plan:
    """Check that a trial fits and how many run at once (on a cluster, ``cleaner``: each trial's Train run
    starts Ray's placement-group cleaner on the head, see :func:`head_cap`).

    Raises:
        BadInput: when no node can hold a worker, or the cluster cannot hold one whole trial.
    """
    bundle, need = worker_bundle(spec), per_trial(spec)
    nodes = res.nodes or (res.total,)
    if local and bundle.get("GPU") and not res.total.get("GPU"):
        raise BadInput("trainable.use_gpu: true, but the embedded Ray would have no GPU (torch.cuda.device_count() "
                       "is 0 here and cluster.num_gpus is not above 0); run on a machine with a GPU, or set "
                       "trainable.use_gpu=false"
                       f"{' and trainable.pack=1' if spec.trainable.pack > 1 else ''}")
    if not any(all(node.get(k, 0.0) >= v for k, v in bundle.items()) for node in nodes):
        shapes = "; ".join(_fmt({k: v for k, v in n.items() if k != TRIAL_SLOT}) for n in nodes)
        raise BadInput(f"trainable.resources_per_worker: a worker needs {_fmt(bundle)} but no node has that "
                       f"(nodes: {shapes}); lower trainable.resources_per_worker or use_gpu, or add nodes")
    short = {k: v for k, v in need.items() if res.total.get(k, 0.0) < v}
    if short:
        raise BadInput(f"trainable.num_workers: one trial needs {_fmt(need)} (driver + "
                       f"{workers(spec)} workers) but the cluster has {_fmt(res.total)}; lower "
                       f"trainable.num_workers, or raise cluster.num_cpus (logical CPUs may exceed cores)")
    fits = {k: times(res.total.get(k, 0.0), v) for k, v in need.items() if v > 0}
    if local and spec.cluster.num_cpus is None:
        fits["CPU"] = max(1, fits["CPU"] - 1)  # local_resources added one trial's worth of spare CPU tokens
    limit = min(fits, key=lambda k: fits[k])
    fit = fits[limit]
    head = None if local else head_cap(spec, res, cleaner)
    capped = (limit, fit) if head is not None and head < fit else None
    fit = min(fit, head) if head is not None else fit
    if capped:
        log.warning("running at most %d trial(s) at a time: each Train run's placement-group cleaner holds about "
                    "%g MB on the head, which has %.1f GiB (cluster.head_memory_per_trial_mb); %s would allow %d",
                    fit, spec.cluster.head_memory_per_trial_mb, (res.head_memory or 0.0) / GIB, *capped)
    conc = min(fit, spec.sweep.max_concurrent_trials) if spec.sweep.max_concurrent_trials else fit
    total_t = total_trials(spec)
    if total_t is not None:
        conc = min(conc, total_t)
    if local:
        res = replace(res, total={**res.total, TRIAL_SLOT: float(max(1, conc))})
    return Plan(
        per_trial=need, worker_bundle=bundle, concurrent_trials=max(1, conc), total_trials=total_t,
        max_epochs=spec.trainable.epochs, resources=res,
        num_cpus_to_start=res.total["CPU"] if local else None, data_cpus=1.0 if spec.trainable.datasets else 0.0,
        workers=workers(spec), pack=spec.trainable.pack if spec.trainable.use_gpu else 1, head_cap=head, fit=capped,
        head_per_trial_mb=spec.cluster.head_memory_per_trial_mb,
    )


def times(total: float, need: float) -> int:
    """How many ``need`` fit in ``total`` (Ray counts resources in 1/10000ths: 3 x GPU 1/3 fill one GPU)."""
    return int(round(total * 10000) // max(1, round(need * 10000)))


def head_cap(spec: SweepSpec, res: Resources, cleaner: bool) -> int | None:
    """The trials the head's memory holds when each Train run starts Ray's placement-group cleaner there
    (``cleaner``: a trial with a worker group on Train's own trainer), else None.

    Train V2 starts one detached cleaner actor per run on the head node, whatever node its trial runs on; each
    holds about ``cluster.head_memory_per_trial_mb`` (0: not counted). A trial in its own process starts none.
    """
    per_trial_mb = spec.cluster.head_memory_per_trial_mb
    if not cleaner or in_process(spec) or not per_trial_mb or res.head_memory is None:
        return None
    return max(1, int(res.head_memory // (per_trial_mb * MB)))
