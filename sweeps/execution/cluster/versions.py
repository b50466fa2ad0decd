"""A driver must run its cluster's Ray (and Python): both versions read before anything starts.

Ray refuses a driver whose Ray or Python version differs from its cluster's, but only once it has connected,
with a bare ``RuntimeError`` traceback. So ``cluster=remote`` runs, their ``--dry-run`` and ``doctor
--address`` read the cluster's versions first, once: from its GCS (the ``cluster_version`` lever), else the
public way, a throwaway ``ray.init`` in a child process whose refusal (Ray's own "Version mismatch" error)
names both versions. Either way one line names both versions and the two ways out (this Ray in the driver's
environment, or the driver submitted to the cluster as a Ray Job, with the exact command), and the run exits 2.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sweeps.errors import BadInput

log = logging.getLogger(__name__)

PYTHON_MATCH = "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"  # Ray's own setting: "patch" (its default) or "minor"
# Ray's own refusal (ray/_private/utils.py, check_version_info: "Version mismatch: The cluster was started
# with:\n    Ray: X\n    Python: Y\nThis process on ... was started with: ...", the same on Ray 2.53 to 2.60)
ERROR = re.compile(r"Version mismatch: The cluster was started with:\s*Ray: (?P<ray>\S+)\s*Python: (?P<py>\S+)")
AUTH_REFUSED = ("InvalidAuthToken", "AuthenticationError", "Unauthenticated")
CONNECT_TIMEOUT_S = 30.0  # a GCS that does not answer: ray.init would wait for minutes
DASHBOARD_PORT = 8265  # Ray's default; a head started with --dashboard-port elsewhere says so only by asking
DASHBOARD_PROBE_S = 1.0
# The public way to the versions: connect as a driver would (no runtime_env: nothing is uploaded), then go.
PROBE = """
import json, logging, sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
else:
    ray.shutdown()
    print(json.dumps({"accepted": True}))
"""


@dataclass(frozen=True)
class Versions:
    ray: str
    python: str


class Unread(BadInput):
    """The cluster's versions could not be read: no address, nothing answered, or it refused this driver for
    another reason (its token)."""


def here() -> Versions:
    import ray

    return Versions(ray.__version__, platform.python_version())


def compatible(cluster: Versions, mine: Versions) -> bool:
    """As Ray decides: the same Ray, and the same Python to the patch (or the minor, if Ray is told so)."""
    level = os.environ.get(PYTHON_MATCH, "patch")
    py_same = cluster.python.split(".")[:2] == mine.python.split(".")[:2] if level == "minor" else \
        cluster.python == mine.python
    return cluster.ray == mine.ray and py_same


def gcs_address(address: str | None) -> str | None:
    """The ``HOST:PORT`` of a cluster's GCS for an explicit ``cluster.address`` (``auto`` and Ray Client
    addresses are read by connecting)."""
    if not address or address == "auto" or "://" in address:
        return None
    return address if ":" in address else f"{address}:6379"


def read(address: str | None) -> Versions:
    """The cluster's Ray and Python, read before anything starts: from its GCS where the ``cluster_version``
    lever applies, else by connecting in a child process (:func:`by_connecting`).

    Raises:
        Unread: no address, or nothing that says the versions answered.
    """
    from sweeps.execution.levers import cluster_version, core

    if not address:
        raise Unread("cluster.address: cluster=remote needs an address (auto, HOST:6379) or $RAY_ADDRESS")
    gcs = gcs_address(address)
    if gcs is not None and core.applies(cluster_version.LEVER):
        meta = cluster_version.read(gcs) or {}
        if meta.get("ray_version"):
            return Versions(str(meta["ray_version"]), str(meta.get("python_version", "")))
        if refused_token(str(meta.get("error", ""))):
            raise Unread(token_message(address))
        log.debug("the GCS at %s said no versions (%s); connecting to read them", gcs, meta.get("error", "none"))
    return by_connecting(address)


def refused_token(text: str) -> bool:
    """Ray's words (its GCS client's log line, its AuthenticationError) for a token it refused or missed."""
    return any(w in text for w in AUTH_REFUSED)


def token_message(address: str) -> str:
    mode = os.environ.get("RAY_AUTH_MODE", "(unset)")
    return (f"cluster.address: the cluster at {address} has token authentication on and refused this driver "
            f"(RAY_AUTH_MODE={mode}): give the driver the cluster's token in RAY_AUTH_TOKEN=<token>, "
            f"RAY_AUTH_TOKEN_PATH=<file> or ~/.ray/auth_token (sweeps then sets RAY_AUTH_MODE=token itself)")


def by_connecting(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Versions:
    """The public way: ``ray.init(address)`` in a child process (it ends with the check, so nothing of it stays
    connected or running). Ray's refusal names the cluster's versions; its acceptance means they are this
    driver's. A refused token ends it at Ray's first log line about it (``ray.init`` itself tries for ~20 s).

    Raises:
        Unread: it did not answer within ``timeout_s``, or refused this driver for another reason.
    """
    stdout, stderr, code = _probe(address, timeout_s)
    said = _last_json(stdout)
    if said.get("accepted"):
        return here()
    error = str(said.get("error") or (stderr.strip().splitlines() or [f"exit status {code}"])[-1])
    found = from_error(error)
    if found is not None:
        return found
    if code is None and refused_token(stderr):
        raise Unread(token_message(address))
    if code is None:
        raise Unread(f"cluster.address: no Ray answered at {address!r} within {timeout_s:.0f} s; is the cluster "
                     f"up, and is HOST:PORT its GCS (ray start --head --port)?")
    if refused_token(error + stderr):
        raise Unread(token_message(address))
    raise Unread(f"cluster.address: cannot connect to Ray at {address!r} ({error.splitlines()[0]}); is the "
                 f"cluster up, and does this process have its token (RAY_AUTH_MODE=token plus RAY_AUTH_TOKEN, "
                 f"RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)?")


def _probe(address: str, timeout_s: float) -> tuple[str, str, int | None]:
    """(stdout, stderr, exit status) of :data:`PROBE`; status None when it was stopped: past ``timeout_s``, or
    as soon as its stderr says the cluster refused its token."""
    proc = subprocess.Popen([sys.executable, "-c", PROBE, address], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[str] = []
    refused = threading.Event()

    def pump(stream: IO[str], into: list[str], watch: bool) -> None:
        for line in stream:
            into.append(line)
            if watch and refused_token(line):
                refused.set()

    pumps = [threading.Thread(target=pump, args=(proc.stdout, out, False), daemon=True),
             threading.Thread(target=pump, args=(proc.stderr, err, True), daemon=True)]
    for p in pumps:
        p.start()
    deadline = time.monotonic() + timeout_s
    code: int | None = None
    while code is None and not refused.is_set() and time.monotonic() < deadline:
        try:
            code = proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
    if code is None:
        proc.kill()
        proc.wait()
    for p in pumps:
        p.join(timeout=5)
    return "".join(out), "".join(err), code


def _last_json(stdout: str) -> dict[str, object]:
    for line in reversed(stdout.strip().splitlines()):
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict):
            return said
    return {}


def from_error(exc: BaseException | str) -> Versions | None:
    """The cluster's versions named in Ray's own "Version mismatch" error, or None for any other error."""
    m = ERROR.search(str(exc))
    return Versions(m["ray"], m["py"]) if m else None


def check(address: str | None) -> Versions:
    """The cluster's versions (read once), when they are this driver's.

    Raises:
        BadInput: the cluster at ``address`` runs other versions than this driver (exit 2), or they could not
            be read (:class:`Unread`).
    """
    cluster = read(address)
    if not compatible(cluster, here()):
        raise BadInput(message(str(address), cluster))
    return cluster


def message(address: str, cluster: Versions, mine: Versions | None = None) -> str:
    """One line: both versions and the two ways out, with the exact commands."""
    mine = mine or here()
    command = job_command(sys.argv[1:], dashboard(address, cluster.ray), shipped_code(Path.cwd()))
    hint = (f" (DASHBOARD_PORT: the head's dashboard port; nothing answered on {DASHBOARD_PORT})"
            if "DASHBOARD_PORT" in command else "")
    return (f"cluster.address: the cluster at {address} runs Ray {cluster.ray} on Python {cluster.python}, this "
            f"driver Ray {mine.ray} on Python {mine.python}; a driver must run its cluster's versions: install "
            f"them here (python {cluster.python} with pip install 'ray[default,tune,train]=={cluster.ray}'), or "
            f"submit the driver to the cluster as a Ray Job: {command}{hint}")


def job_command(argv: Sequence[str], dashboard_url: str, py_modules: Sequence[str]) -> str:
    """The ``ray job submit`` that runs this command on the cluster: the working directory (the user's project)
    goes with it, and ``py_modules`` (sweeps' own code, where the working directory does not hold it); the
    command itself without ``--dry-run`` and with ``cluster.address=auto`` (the job's own cluster)."""
    args = list(argv)
    at = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    if args[at:at + 1] not in (["run"], ["resume"], ["extend"]):
        args = ["run", "+experiment=NAME", "cluster=remote"]
        at = 0
    args = args[:at] + [re.sub(r"^cluster\.address=.*", "cluster.address=auto", a) for a in args[at:]
                        if a != "--dry-run"]
    if args[at] == "run" and not any(a.startswith("cluster.address=") for a in args):
        args.append("cluster.address=auto")
    env = ""
    if py_modules:
        env = " --runtime-env-json " + shlex.quote(json.dumps({"py_modules": list(py_modules)}))
    return (f"ray job submit --address {dashboard_url} --working-dir .{env} -- python -m sweeps "
            f"{' '.join(shlex.quote(a) for a in args)}")


def shipped_code(cwd: Path) -> list[str]:
    """What a Ray Job must carry besides its working directory for ``python -m sweeps`` to import on the head:
    nothing when ``cwd`` is this project's checkout (it holds ``sweeps/``), else the installed packages' folders
    (a wheel in site-packages, or a checkout elsewhere)."""
    import sweeps

    if Path(sweeps.__file__).resolve().parent.parent == cwd.resolve():
        return []
    from sweeps.execution.cluster import shipping

    return [p for name in ("sweeps", "trainables", "hydra_plugins") for p in shipping.sources(name)]


def dashboard(address: str, ray_version: str) -> str:
    """The cluster's dashboard (the Jobs API) for ``ray job submit``: ``$RAY_API_SERVER_ADDRESS``, an
    ``http(s)://`` address, or the head's port 8265 when a dashboard of the cluster's Ray answers there (another
    Ray on the same host may hold it); else a placeholder to fill in."""
    if os.environ.get("RAY_API_SERVER_ADDRESS"):
        return os.environ["RAY_API_SERVER_ADDRESS"]
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    host = address.split("://")[-1].rsplit(":", 1)[0] if address != "auto" else ""
    if host and _dashboard_of(f"http://{host}:{DASHBOARD_PORT}", ray_version):
        return f"http://{host}:{DASHBOARD_PORT}"
    return f"http://{host or 'HEAD'}:DASHBOARD_PORT"


def _dashboard_of(url: str, ray_version: str) -> bool:
    """Whether a dashboard of Ray ``ray_version`` answers at ``url`` (Ray's Jobs API ``GET /api/version``)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=DASHBOARD_PROBE_S) as reply:
            said = json.loads(reply.read().decode() or "{}")
    except urllib.error.HTTPError as exc:  # 401/403: a dashboard that wants the token (whose, it does not say)
        return exc.code in (401, 403)
    except (OSError, ValueError):
        return False
    return isinstance(said, dict) and said.get("ray_version") == ray_version
