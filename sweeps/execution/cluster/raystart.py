"""Starting or joining Ray with the settings a sweep needs (set before ``ray.init``)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from sweeps import ports
from sweeps.config.spec import SweepSpec
from sweeps.errors import BadInput
from sweeps.execution.cluster import loopback, memory, shipping, versions
from sweeps.execution.levers import auth_refresh, core
from sweeps.execution.resources.plan import in_process
from sweeps.execution.resources.plan import workers as trial_workers
from sweeps.execution.warmstart import pool, warm

log = logging.getLogger(__name__)


def train_env(spec: SweepSpec) -> dict[str, str]:
    """Env vars for Ray Train's controller and workers.

    The default 2 s health-check interval makes each ``ray.train.report`` cost up to ~2 s (docs/ray.md).
    Train's structured JSON logs (nobody reads them: the trial's own logs and MLflow are the record) and,
    on the embedded local Ray (no node can be preempted), the preemption watcher are switched off: work
    removed, though its time saving is within this machine's noise (benchmarks/RESULTS.md).
    """
    env = {
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": str(spec.cluster.health_check_interval_s),
        "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(spec.cluster.worker_start_timeout_s),
        "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
        "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
        "RAY_TRAIN_ENABLE_WORKER_STRUCTURED_LOGGING": "0",
        "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning",
        # Train sets it on its controller itself; set here, the lean trainer's processes inherit it
        "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0",
        "PL_DISABLE_FORK": "1",  # Tune sets it on every trial actor itself (a Lightning setting)
    }
    if spec.cluster.mode == "local":
        env["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] = "0"
        env.update(loopback.worker_env())
    if in_process(spec) and THREAD_TIMEOUT not in os.environ:
        env[THREAD_TIMEOUT] = str(STOPPED_LOOP_S)
    return env


# Tune reuses a trial's process for the next trial only once the trial's training thread has ended, and waits
# TUNE_FUNCTION_THREAD_TIMEOUT_S (2 s) for it before it fails the *next* trial. A trial in its own process that
# Tune stops mid-epoch (ASHA, a budget) ends at its next report, after its epoch: it is given that long, up to this.
THREAD_TIMEOUT = "TUNE_FUNCTION_THREAD_TIMEOUT_S"
STOPPED_LOOP_S = 900


TOKEN_HELP = ("RAY_AUTH_MODE=token plus the cluster's token in RAY_AUTH_TOKEN=<token>, "
              "RAY_AUTH_TOKEN_PATH=<file> or the file ~/.ray/auth_token")


def token_source(env: Mapping[str, str], home: str) -> str | None:
    """Where this process would read a Ray auth token from, or None (pure: ``env`` and the home folder)."""
    if env.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path and os.path.isfile(os.path.expanduser(path)):
        return "RAY_AUTH_TOKEN_PATH"
    if os.path.isfile(os.path.join(home, ".ray", "auth_token")):
        return "~/.ray/auth_token"
    return None


def driver_auth_env(env: Mapping[str, str], home: str) -> dict[str, str]:
    """What a driver joining a cluster must add to its env: RAY_AUTH_MODE=token when it has a token and the
    mode is unset (Ray turns it on by itself only for ``address=auto``). An explicit mode is respected."""
    if env.get("RAY_AUTH_MODE") is None and token_source(env, home):
        return {"RAY_AUTH_MODE": "token"}
    return {}


TOKEN_BY_DEFAULT = (2, 59)  # the first Ray whose local ray.init() turns token authentication on by itself


def ray_version() -> tuple[int, int]:
    from sweeps.execution.levers import core

    parts = (core.installed("ray").split(".") + ["0", "0"])[:2]
    return (int(parts[0]), int(parts[1])) if all(p.isdigit() for p in parts) else (0, 0)


def local_token_auth() -> None:
    """The embedded Ray with token authentication on whatever the Ray: before 2.59 Ray starts it without one,
    so ``RAY_AUTH_MODE=token`` is set (Ray then writes its token as 2.59+ does); a mode the user set is kept."""
    if os.environ.get("RAY_AUTH_MODE") is not None or ray_version() >= TOKEN_BY_DEFAULT:
        return
    imported = "ray" in sys.modules and hasattr(sys.modules["ray"], "init")
    if imported and not core.applies(auth_refresh.LEVER):
        log.warning("the embedded Ray starts without token authentication (Ray %s turns it on only from 2.59, and "
                    "this process imported Ray before sweeps could set it: %s); export RAY_AUTH_MODE=token",
                    core.installed("ray"), core.reason(auth_refresh.LEVER))
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    if imported:
        auth_refresh.refresh()


def enable_driver_auth() -> None:
    """A driver joining a cluster: ``RAY_AUTH_MODE=token`` when it holds a token and the mode is unset (called
    before anything imports Ray where it can be; else Ray's cached config is refreshed, or the user is asked)."""
    extra = driver_auth_env(os.environ, os.path.expanduser("~"))
    if not extra:
        return
    imported = "ray" in sys.modules and hasattr(sys.modules["ray"], "init")
    if imported and not core.applies(auth_refresh.LEVER):
        source = token_source(os.environ, os.path.expanduser("~"))
        raise BadInput(f"cluster.address: this driver has a Ray token ({source}) but RAY_AUTH_MODE is not set; "
                       f"Ray reads it when imported, and this process imported Ray before sweeps could set it "
                       f"({core.reason(auth_refresh.LEVER)}): export RAY_AUTH_MODE=token and run again")
    os.environ.update(extra)
    if not imported:
        return  # Ray reads it when it is imported
    try:  # Ray caches its config at import; re-read it, as Ray's own enable_token_auth does
        auth_refresh.refresh()
    except Exception as exc:  # the env var alone still reaches ray.init's own checks
        log.debug("could not refresh Ray's config after setting RAY_AUTH_MODE (%s)", exc)


def start(spec: SweepSpec, num_cpus: float | None, custom: dict[str, float] | None = None,
          trials_at_once: int = 1) -> None:
    """Start the embedded local Ray (127.0.0.1, token auth left on) or connect to the configured cluster.

    ``trials_at_once``: the plan's concurrency (local mode: whether warm processes preload torch)."""
    import ray

    memory.reset_peak_rss()  # this sweep's report states its own peak (a notebook kernel runs many)
    env = train_env(spec)
    for k, v in env.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if ray.is_initialized():
        return
    levers = warm.current(spec.cluster.mode == "local")
    if spec.cluster.mode == "local":
        if levers.lean:
            from sweeps.execution.levers import tune_actors

            tune_actors.lean_trial_actors()
        loopback.enter_local()  # every Ray listener on 127.0.0.1 (undone in stop())
        local_token_auth()
        init_local(
            num_cpus=num_cpus,
            num_gpus=spec.cluster.num_gpus,
            resources=custom or None,
            runtime_env=local_runtime_env(env),
            logging_level=logging.WARNING,
            log_to_driver=spec.cluster.log_to_driver,
            configure_logging=True,
            **dashboard_settings(levers),
            **worker_pool_settings(levers, trials_at_once, trial_workers(spec)),
        )
        return
    address = spec.cluster.address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise BadInput("cluster.address: cluster=remote needs an address (auto, HOST:6379) or $RAY_ADDRESS")
    runtime_env = shipping.runtime_env(spec, env)  # code and settings travel to every node
    from ray.exceptions import AuthenticationError

    enable_driver_auth()
    try:
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 log_to_driver=spec.cluster.log_to_driver)
    except RuntimeError as exc:
        cluster = versions.from_error(exc)
        if cluster is None:
            raise
        raise BadInput(versions.message(address, cluster)) from None
    except (ConnectionError, AuthenticationError) as exc:
        raise BadInput(f"cluster.address: cannot connect to Ray at {address!r} ({exc}); is the cluster up, and "
                       f"does this process have its token? A driver needs {TOKEN_HELP} (now: RAY_AUTH_MODE="
                       f"{os.environ.get('RAY_AUTH_MODE', '(unset)')}, token from "
                       f"{token_source(os.environ, os.path.expanduser('~')) or 'nowhere'})") from None


START_ATTEMPTS = 3
NODE_START_TIMEOUT = "timed out during startup"  # ray.init: its raylet did not register with its GCS in 30 s


def init_local(**kwargs: Any) -> None:
    """``ray.init(**kwargs)`` for the embedded Ray, started again (its leftovers stopped first) when its node
    times out: Ray waits a fixed 30 s for the raylet to register, which a loaded machine can miss."""
    import ray

    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:
            if NODE_START_TIMEOUT not in str(exc) or attempt == START_ATTEMPTS:
                raise
            stopped = stop_own_ray_processes()
            log.warning("the embedded Ray's node did not register within Ray's 30 s (a loaded machine?); "
                        "stopped its %d process(es), starting it again (attempt %d of %d)", stopped,
                        attempt + 1, START_ATTEMPTS)


def stop_own_ray_processes() -> int:
    """SIGKILL the Ray processes this process started (its children: GCS, raylet, ...) after a failed start.

    ``ray.init`` leaves them running when its node times out; a second start beside them would compete with
    them for the machine that was already too busy.
    """
    import signal

    killed = 0
    for pid in pool.child_pids(os.getpid()):
        cmd = " ".join(pool.cmdline(pid)[:3])
        if "ray" in cmd:  # gcs_server, raylet, Ray's Python daemons (all under site-packages/ray/)
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                continue
    return killed


def local_runtime_env(env: dict[str, str]) -> dict[str, Any] | None:
    """The embedded local Ray's job ``runtime_env``: none. Every Ray process descends from this one, so the
    variables are set here (the sweep's values win) and inherited. With no job-level runtime environment the
    Tune trial actors land on the processes Ray prestarts for the first driver; with one, every actor needs
    a fresh process (docs/ray.md, "Trial start-up")."""
    os.environ.update(env)
    return None


def worker_pool_settings(levers: warm.Levers, trials_at_once: int = 1, workers_per_trial: int = 1
                         ) -> dict[str, Any]:
    """Local mode: the raylet's worker-pool settings (docs/ray.md, "Trial start-up").

    Ray prestarts idle processes (one per logical CPU, up to the cores) when the driver connects; only actors
    with the job's runtime env can take them (the Tune trial actors, and with the lean trainer the Train
    processes too). With the warm pool, and a core free for it (``pool.preload``), every process the raylet
    starts imports torch and Ray Train before it is needed. ``SWEEPS_PRESTART=0`` turns the first prestart
    off (a benchmark lever).
    """
    from sweeps.execution.levers import core, raylet_config, site_preload

    preloads = False
    if levers.pool:
        preloads, why = pool.preload(trials_at_once, workers_per_trial)
        log.debug("warm processes %s torch before work (%s)", "import" if preloads else "do not import", why)
    first_driver = os.environ.get("SWEEPS_PRESTART", "1") != "0"
    if preloads and site_preload.ensure(raylet_config.PRELOAD):
        preloads = False  # done before registration instead (a process is leasable only once warm)
    if (preloads or not first_driver) and core.applies(raylet_config.LEVER):
        return raylet_config.init_kwargs(preloads, first_driver)
    return {}



def dashboard_settings(levers: warm.Levers) -> dict[str, Any]:
    """Local mode: Ray's dashboard only where something a sweep runs asks its State API (Train's own per-run
    placement-group cleaner, on Ray's public path); with the lean trainer, none (see below)."""
    return {"include_dashboard": False} if levers.lean else state_api_settings()


def state_api_settings() -> dict[str, Any]:
    """Local mode on Ray's public path: the dashboard on a port chosen here, and ``RAY_API_SERVER_ADDRESS``
    naming it. (With the lean trainer nothing a sweep runs asks the State API: Train's per-run cleaner is left
    out and the reaper reads the GCS, so the embedded Ray starts without its dashboard, a dozen Python
    processes and ~4 CPU-seconds less per sweep; docs/ray.md, "Trial start-up".)

    Every Ray process inherits the variable, so Train's cleaner finds this cluster's dashboard even when
    another Ray runs on the host (the ``state_api_address`` lever says why that matters).
    """
    from sweeps.execution.levers import state_api_address

    global _api_address
    var = state_api_address.VARIABLE
    if os.environ.get(var) and os.environ[var] != _api_address:
        return {}  # the user's own
    port = ports.free_port()  # never Ray's own default ports (the agent's 52365)
    if core.applies(state_api_address.LEVER):
        _api_address = os.environ[var] = f"http://127.0.0.1:{port}"
    return {"dashboard_port": port}


_api_address: str | None = None


def stop() -> None:
    """Stop Ray (a no-op when it is not running). Never beside other work of this process that holds Ray's
    objects: :func:`sweeps.ops.launch.stop_ray_while` says why."""
    import ray

    from sweeps.execution.levers import site_preload

    if ray.is_initialized():
        ray.shutdown()
    loopback.leave_local()
    site_preload.remove()

