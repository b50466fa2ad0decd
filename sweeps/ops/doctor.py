"""``doctor``: check the environment and say what is wrong and how to fix it."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sweeps import paths, uris


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _package(name: str, fix: str) -> Check:
    try:
        mod = importlib.import_module(name)
        return Check(name, True, getattr(mod, "__version__", "installed"))
    except Exception as exc:  # any import failure is a finding, not a crash
        return Check(name, False, f"cannot import: {exc}", fix)


def check_ray_default() -> Check:
    try:
        importlib.import_module("ray.dashboard")
        importlib.import_module("aiohttp")
        return Check("ray[default]", True, "dashboard + State API available")
    except Exception as exc:
        return Check("ray[default]", False, f"missing ({exc}): early-stopped trials leak their workers",
                     "pip install 'ray[default,tune,train]'")


def check_store(uri: str | None) -> Check:
    from sweeps.errors import BadInput
    from sweeps.tracking import client as mc

    uri = uri or paths.default_tracking_uri()
    try:
        mc.probe(uri, timeout_s=5)
        return Check("MLflow store", True, uri)
    except BadInput as exc:
        return Check("MLflow store", False, str(exc), "start the server, or drop tracking.uri for the local store")


def check_storage(path: str | None) -> Check:
    location = path or paths.default_storage()
    if uris.is_remote(location):
        from sweeps.errors import BadInput
        from sweeps.execution.resources.storage import check_storage as probe

        try:
            probe(location)
        except BadInput as exc:
            return Check("storage", False, str(exc), "check the URI and the AWS_*/GOOGLE_* credentials")
        return Check("storage", True, f"{location} writable")
    folder = Path(location)
    probe_dir = folder if folder.exists() else next((p for p in folder.parents if p.exists()), Path("/"))
    if os.access(probe_dir, os.W_OK):
        free = shutil.disk_usage(probe_dir).free / 2**30
        ok = free > 1.0
        return Check("storage", ok, f"{folder} writable, {free:.1f} GiB free",
                     "" if ok else "free disk space: checkpoints need room")
    return Check("storage", False, f"{folder} is not writable", "set storage.path to a writable folder")


def check_crontab() -> Check:
    found = shutil.which("crontab")
    return Check("crontab", bool(found), found or "not found",
                 "apt-get install cron (needed only for `sweeps schedule`)", required=False)


def check_gpu() -> Check:
    try:
        import torch

        n = torch.cuda.device_count()
        detail = f"{n} CUDA device(s)" + (f": {torch.cuda.get_device_name(0)}" if n else "")
        return Check("GPU", n > 0, detail, "none needed for CPU sweeps; use_gpu=true needs one", required=False)
    except Exception as exc:
        return Check("GPU", False, f"torch cannot query CUDA: {exc}", required=False)


def check_auth() -> Check:
    from sweeps.execution.cluster import raystart
    from sweeps.execution.levers import auth_refresh, core

    mode = os.environ.get("RAY_AUTH_MODE", "")
    if mode.lower() in ("disabled", "none", "off"):
        return Check("Ray token auth", False, f"RAY_AUTH_MODE={mode}", "unset RAY_AUTH_MODE: keep auth on")
    if mode or raystart.ray_version() >= raystart.TOKEN_BY_DEFAULT:
        how = f"RAY_AUTH_MODE={mode}" if mode else "Ray's default"
        return Check("Ray token auth", True, f"on ({how})")
    if core.applies(auth_refresh.LEVER):
        return Check("Ray token auth", True, f"on (sweeps sets RAY_AUTH_MODE=token: Ray {core.installed('ray')} "
                     f"would start the embedded Ray without it)")
    return Check("Ray token auth", False, f"Ray {core.installed('ray')} starts the embedded Ray without token auth",
                 "export RAY_AUTH_MODE=token (Ray reads it when imported), or use Ray >= 2.59")


def check_token_file() -> Check:
    """Ray writes ``~/.ray/auth_token`` with the umask's mode (often 0644): anyone on the machine could read it."""
    path = Path(os.path.expanduser("~")) / ".ray" / "auth_token"
    if not path.is_file():
        return Check("Ray token file", True, "none yet (Ray writes one at the first local start)", required=False)
    mode = path.stat().st_mode & 0o777
    ok = not mode & 0o077
    return Check("Ray token file", ok, f"{path} mode {mode:04o}", f"chmod 600 {path}", required=False)


def check_warm_start() -> Check:
    """Which warm-start levers a sweep would use here (docs/ray.md, "Trial start-up")."""
    from sweeps.execution.warmstart import warm

    levers = warm.levers(local=True)
    return Check("warm trial start", levers.lean and levers.pool, levers.describe(),
                 "trials start cold (slower, same results); SWEEPS_WARM=0 turns it off on purpose",
                 required=False)


def check_loopback() -> Check:
    """Where the embedded Ray and its rendezvous would listen here (docs/security.md, "Loopback only, by default")."""
    from sweeps.execution.cluster import loopback

    note = loopback.listeners("local")
    return Check("embedded Ray listeners", loopback.internals_missing() is None, note,
                 "install Ray 2.60 (the release the loopback_node lever was checked on; pyproject.toml allows "
                 ">=2.53,<2.61) for loopback-only listeners",
                 required=False)


def check_state_api(address: str) -> Check:
    """A remote cluster's State API (the dashboard): Train's own cleaner needs it; the sweep does not."""
    from sweeps.execution.cluster import remote
    from sweeps.execution.warmstart import warm

    answers, detail = remote.state_api(address, warm.levers(local=False).lean)
    return Check("Ray State API", bool(answers), detail, "start the head with the dashboard (ray[default]), or "
                 "leave it off: a sweep on this Ray frees its placement groups itself", required=False)


MISMATCH_FIX = "install the cluster's Ray and Python in this environment, or submit the driver as a Ray Job"


def check_cluster_versions(address: str) -> Check:
    """The cluster's Ray and Python against this driver's, read once before connecting (or by a throwaway
    connection in a child process): a mismatch fails every sweep on it."""
    from sweeps.errors import BadInput
    from sweeps.execution.cluster import raystart, versions

    try:
        raystart.enable_driver_auth()
        cluster = versions.read(address)
    except BadInput as exc:
        return Check("cluster versions", False, str(exc), "check the address, that the cluster is up, and the "
                     "token (README, \"Running on a Ray cluster\")")
    mine = versions.here()
    if not versions.compatible(cluster, mine):
        return Check("cluster versions", False, versions.message(address, cluster, mine), MISMATCH_FIX)
    return Check("cluster versions", True, f"Ray {cluster.ray}, Python {cluster.python}: the driver's own")


def check_drain(address: str) -> Check:
    """Whether the cluster's worker nodes drain on SIGTERM (spot capacity: docs/cluster.md), from what each
    node's processes inherited; what Ray cannot show is said."""
    from sweeps.execution.cluster import drain

    try:
        ok, detail = drain.summary(drain.survey(address))
    except RuntimeError as exc:
        return Check("node drain", False, str(exc), "check the address and the token", required=False)
    return Check("node drain", ok, detail, "start worker nodes with `ray start --block` on Ray 2.60 and "
                 f"{drain.DRAIN_ENV} > the Train notice poll (5 s) + an epoch + a checkpoint upload, shorter than "
                 "the pod's terminationGracePeriodSeconds (deploy/kuberay/raycluster.yaml)", required=False)


def check_levers() -> Check:
    """Which levers (private Ray/Tune/Train/Optuna surfaces, docs/ray.md "Levers") this environment uses."""
    from sweeps.execution.levers import core

    off = [f"{lv.name} ({core.reason(lv)})" for lv in core.all_levers() if not core.applies(lv)]
    on = [lv.name for lv in core.all_levers() if core.applies(lv)]
    detail = f"on: {', '.join(on) or 'none'}" + (f"; off, their public fallbacks run: {'; '.join(off)}" if off else "")
    return Check("levers", not off, detail, "every feature works without them; install a Ray they were "
                 "checked on for the faster or stricter path", required=False)


def check_configs() -> Check:
    """The config folders searched, and which experiments compose from them; none composing is a failure."""
    from sweeps.config import compose
    from sweeps.errors import BadInput

    folders = ", ".join(str(p) for p in paths.conf_dirs())
    fix = "run `python -m sweeps init` in your project, or set SWEEPS_CONF_DIR to a folder of sweeps configs"
    if (error := paths.conf_env_error()) is not None:
        return Check("configs", False, f"{error}: no config resolves", fix)
    names = compose.groups().get("experiment", [])
    broken = []
    for name in names:
        try:
            compose.compose([f"+experiment={name}"])
        except BadInput as exc:
            broken.append(f"{name} ({str(exc).splitlines()[0][:120]})")
    good = len(names) - len(broken)
    detail = f"{folders}: {good} of {len(names)} experiments compose"
    detail += f"; not: {'; '.join(broken)}" if broken else ""
    return Check("configs", good > 0, detail, fix)


def run_checks(tracking_uri: str | None = None, storage: str | None = None,
               address: str | None = None) -> list[Check]:
    """Every check, the cluster's versions first when ``address`` is given: on a mismatch this environment's
    Ray must change before anything else here means much, so the rest is skipped (and doctor answers at once)."""
    first: list[Check] = []
    if address:
        first.append(check_cluster_versions(address))
        if first[0].fix == MISMATCH_FIX:
            return [*first, Check("other checks", True, "skipped: run doctor again once this environment runs the "
                                  "cluster's Ray and Python", required=False)]
    checks: list[Callable[[], Check]] = [
        lambda: Check("python", sys.version_info >= (3, 11), sys.version.split()[0], "use Python 3.11+"),
        lambda: _package("ray", "pip install 'ray[default,tune,train]'"),
        check_ray_default,
        lambda: _package("torch", "pip install torch==2.13.0"),
        lambda: _package("mlflow", "pip install mlflow"),
        lambda: _package("optuna", "pip install optuna"),
        lambda: _package("hyperopt", "pip install hyperopt"),
        lambda: _package("trainables", "pip install -e . (the trainables package must be installed)"),
        lambda: check_store(tracking_uri),
        lambda: check_storage(storage),
        check_crontab,
        check_gpu,
        check_auth,
        check_token_file,
        check_warm_start,
        check_loopback,
        check_configs,
        check_levers,
        *([lambda: check_state_api(address), lambda: check_drain(address)] if address else []),
    ]
    return [*first, *(c() for c in checks)]
