"""Warm processes for the next trial: how many the trials about to start need, asked of the raylet while trials run.

docs/ray.md, "Trial start-up". The raylet hands a new actor an idle process only when the process was started
for the same job and the same runtime env (the exact serialized string; ``""`` and ``"{}"`` are one), and an
actor's process exits with the actor, so every trial start needs fresh ones: its Train controller, the
controller's synchronization actor, its workers, and its Tune trial actor unless Tune reuses one. Ray
prestarts idle processes only once, when the first driver connects; the ``prestart`` lever
(:mod:`sweeps.execution.levers.prestart`) asks its raylet for more, kept idle for a bounded time.

On the embedded Ray, where the lean trainer gives every trial process the job's runtime env, the sweep keeps
as many idle processes as the trials about to start need (counted in ``/proc``: the raylet's idle and
starting workers), and no more once every trial has started. Where a core is free for it (``preload``),
those processes import torch and Ray Train before they are needed (the ``raylet_config`` lever); importing
torch does not touch CUDA (Ray sets ``CUDA_VISIBLE_DEVICES`` when a process is leased, after that).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from sweeps.execution.levers import prestart
from sweeps.execution.resources import plan

log = logging.getLogger(__name__)

KEEP_ALIVE_S = 120  # an unused warm process goes back after this long (the raylet ends it)
EVERY_S = 1.0
SETTLE_S = 2.0  # after asking the raylet for processes, before asking again
IDLE_NAMES = ("ray::IDLE",)  # a registered worker waiting for work (its process title)
STARTING = ("default_worker.py", "setup_worker.py")  # a worker still starting (its command line)


PRELOAD_SWITCH = "SWEEPS_PRELOAD"  # "1": always preload, "0": never; unset: decided per sweep (below)


def preload(trials_at_once: int, workers_per_trial: int, cores: int | None = None) -> tuple[bool, str]:
    """Whether warm processes import torch and Ray Train before work, and why (the sweep's log line).

    A preload takes a Train process's ~1.5 CPU-s torch import off its trial's start, but the raylet preloads
    into every process it starts: the synchronization actor of each Train run and Ray Data's coordinator too,
    which never use torch. That costs nothing on a core the trials leave free, and it is pure cost on cores
    the trials' workers fill, where it only slows the training beside it (docs/ray.md, "Trial start-up";
    benchmarks/RESULTS.md, "The preload"). So: preload when trials start one at a time, or when the machine
    has more cores than the workers of the trials running at once.
    """
    forced = os.environ.get(PRELOAD_SWITCH, "")
    if forced in ("0", "1"):
        return forced == "1", f"{PRELOAD_SWITCH}={forced}"
    cores = cores or plan.cores()
    busy = trials_at_once * max(1, workers_per_trial)
    if trials_at_once <= 1:
        preloads, why = True, "trials start one at a time"
    elif cores > busy:
        preloads, why = True, f"{cores} cores, {busy} Train workers at once"
    else:
        preloads, why = False, f"{trials_at_once} trials x {workers_per_trial} Train workers fill the {cores} cores"
    return preloads, why + (f"; {PRELOAD_SWITCH}={forced!r} ignored: 0 or 1" if forced else "")


def child_pids(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [p.decode(errors="replace") for p in f.read().split(b"\0") if p]
    except OSError:
        return []


def idle_processes(driver_pid: int | None = None) -> int:
    """Idle or starting workers of the embedded Ray this process started (children of its raylet)."""
    count = 0
    for raylet in child_pids(driver_pid or os.getpid()):
        if not any("raylet" in part for part in cmdline(raylet)[:1]):
            continue
        for pid in child_pids(raylet):
            cmd = cmdline(pid)
            if cmd and (cmd[0].startswith(IDLE_NAMES) or any(part.endswith(STARTING) for part in cmd[:3])):
                count += 1
    return count


class Pool:
    """Keeps the embedded Ray's idle processes at what the trials about to start need."""

    def __init__(self, per_trial: int, concurrency: int, total_trials: int | None,
                 keep_alive_s: int = KEEP_ALIVE_S) -> None:
        import ray

        self.per_trial, self.concurrency, self.total = per_trial, max(1, concurrency), total_trials
        self.keep_alive_s = keep_alive_s
        self.job_id = bytes.fromhex(ray.get_runtime_context().get_job_id())
        self.runtime_env = prestart.job_runtime_env()
        node = next(n for n in ray.nodes() if n.get("Alive"))
        self.address = f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}"
        self.requested = 0
        self.failed: str | None = None
        self.settle_until = 0.0  # processes asked for appear over seconds: no second ask before then

    def wanted(self, trials: list[Any]) -> int:
        """Processes the trials that have yet to start (or to resume) will take, up to one wave of them."""
        waiting = sum(t.status in ("PENDING", "PAUSED") for t in trials)
        unborn = 0 if self.total is None else max(self.total - len(trials), 0)
        to_start = waiting + unborn if self.total is not None else self.concurrency
        return self.per_trial * min(self.concurrency, to_start)

    def refill(self, trials: list[Any]) -> int:
        """Ask the raylet for the processes missing now; returns how many were asked for."""
        if self.failed or time.monotonic() < self.settle_until:
            return 0
        missing = self.wanted(trials) - idle_processes()
        if missing <= 0:
            return 0
        # the raylet starts only as many at once as it may start processes concurrently (here: the cores; the
        # rest of a request is dropped), and a started one shows in /proc at once: ask again after a short settle
        self.settle_until = time.monotonic() + SETTLE_S
        try:
            prestart.request(self.address, self.job_id, self.runtime_env, missing, self.keep_alive_s)
        except Exception as exc:  # the call moved or the raylet refused: cold starts from now on
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("warm pool off: the raylet refused PrestartWorkers (%s); trials start cold", self.failed)
            return 0
        self.requested += missing
        return missing


HOLD_SWITCH = "SWEEPS_POOL_HOLD"  # "0": refill during trial starts too (the benchmarks' baseline)
HOLD_MAX_S = 60.0  # a start with no first result after this long no longer holds the pool back


def holds(starting: dict[str, float], now: float) -> bool:
    """Whether the pool waits: some trial started less than ``HOLD_MAX_S`` ago and has not reported yet.

    A process the raylet starts registers as leasable before it has imported torch, and the raylet leases its
    newest idle process first: one started while a trial starts is handed to that trial's controller or
    workers half-warm, whose actors then wait for its imports, which compete for the cores with the start
    itself (benchmarks/results/startup_profile.txt). So the pool is refilled between starts, not during them.
    """
    if os.environ.get(HOLD_SWITCH, "1") == "0":
        return False
    return any(now - began < HOLD_MAX_S for began in starting.values())


def pool_callback(per_trial: int, concurrency: int, total_trials: int | None) -> Any:
    """A Tune callback that refills the pool every second of Tune's loop (made once Ray runs), except while a
    trial is between its start and its first result (:func:`holds`). ``per_trial``: processes a trial start
    takes with its controller an actor of its own; one less where the controller runs in the trial actor."""
    from ray.tune import Callback

    from sweeps.execution.levers import lean_trainer

    per_trial -= 1 if lean_trainer.in_trial() else 0

    class Refill(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.pool: Pool | None = None
            self.next_at = 0.0
            self.starting: dict[str, float] = {}  # trial -> when it started, until its first result

        def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks into tuner.pkl
            return {**self.__dict__, "pool": None, "starting": {}}

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.starting[trial.trial_id] = time.monotonic()

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            self.starting.pop(trial.trial_id, None)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.starting.pop(trial.trial_id, None)

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.starting.pop(trial.trial_id, None)

        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            now = time.monotonic()
            if now < self.next_at or holds(self.starting, now):
                return
            self.next_at = now + EVERY_S
            if self.pool is None:
                self.pool = Pool(per_trial, concurrency, total_trials)
            self.pool.refill(trials)  # a /proc scan and, now and then, one local gRPC call: milliseconds

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            if self.pool is not None:
                log.info("warm pool: asked the raylet for %d process(es) in all", self.pool.requested)

    return Refill()
