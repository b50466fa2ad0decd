"""Real parts for the cluster tests and benchmarks/cluster.py: an S3-compatible server (moto) on 127.0.0.1 and a
multi-node Ray cluster on this machine whose worker nodes do NOT have this project.

Every node is a ``ray start --block`` process in its own session (process group), so it can be stopped or
SIGKILLed on its own; nothing here stops a Ray it did not start. Token authentication stays on: the head writes
the token under ``$HOME/.ray/auth_token`` (HOME is the test's own) and every node and client runs with
``RAY_AUTH_MODE=token`` and that HOME.

A worker node is started with ``unshare -m`` in a mount namespace of its own where the checkout (found from this
file's location), the checkout that holds the test interpreter's virtualenv, and the editable-install hook of
``sweeps`` in that virtualenv are hidden: the virtualenv is first bound to another path (the libraries stay), then
empty tmpfs mounts cover the checkouts and empty files cover the hook. ``import sweeps`` fails there
(:attr:`WorkerNode.probe` records the proof), so code only arrives through the driver's ``runtime_env``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
# What a node that gave up at its start on a loaded machine says (it is started again: Cluster.start_worker)
STARTUP_GAVE_UP = ("timed out during startup", "Failed to connect to GCS")
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # tiny sweeps: keep /dev/shm use small on a shared box
DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    from sweeps.ports import free_port as free

    return free()


def wait_until(pred, timeout: float, what: str, interval: float = 0.5):  # noqa: ANN001, ANN201
    """conftest's ``wait_for``, with this module's argument order and a finer poll."""
    from conftest import wait_for

    return wait_for(pred, timeout, interval, what)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _kill_tree_marked(marker: str) -> None:
    """SIGKILL processes whose command line names ``marker`` (a temp dir only this harness created)."""
    import psutil

    for p in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(p.info["cmdline"] or []):
                p.kill()


# -- S3 --------------------------------------------------------------------------------------------------------
@dataclass
class S3Server:
    """``moto_server`` on 127.0.0.1 with one bucket; :attr:`env` is what every client needs."""

    proc: subprocess.Popen[bytes]
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, **DUMMY_AWS}

    def uri(self, *parts: str) -> str:
        return "/".join([f"s3://{self.bucket}", *parts])

    def keys(self, prefix: str = "") -> list[str]:
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, **_boto_creds())
        out: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def stop(self) -> None:
        _kill_group(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def _boto_creds() -> dict[str, str]:
    return {"aws_access_key_id": DUMMY_AWS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": DUMMY_AWS["AWS_SECRET_ACCESS_KEY"],
            "region_name": DUMMY_AWS["AWS_DEFAULT_REGION"]}


def start_s3(log_path: Path, bucket: str = "sweeps-test") -> S3Server:
    exe = Path(sys.executable).parent / "moto_server"
    if not exe.exists():
        raise RuntimeError("moto_server is missing: pip install 'moto[server]>=5.2.5' boto3 (the test extras)")
    port = free_port()
    with log_path.open("ab") as out:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    srv = S3Server(proc, port, bucket)

    def up() -> bool:
        try:
            with urllib.request.urlopen(srv.endpoint, timeout=2):
                return True
        except OSError:
            return proc.poll() is not None  # died: fall through to the check below

    wait_until(up, 90, "moto_server to answer")
    if proc.poll() is not None:
        raise RuntimeError(f"moto_server exited: {log_path.read_text()[-2000:]}")
    import boto3

    boto3.client("s3", endpoint_url=srv.endpoint, **_boto_creds()).create_bucket(Bucket=bucket)
    return srv


# -- Ray nodes -------------------------------------------------------------------------------------------------
@dataclass
class Node:
    """One ``ray start --block`` process (and everything it started), in its own process group."""

    proc: subprocess.Popen[bytes]
    temp_dir: Path
    log_path: Path
    probe_path: Path | None = None
    node_id: str = ""

    @property
    def probe(self) -> str:
        """What ``python -c "import sweeps"`` printed in the node's namespace before Ray started."""
        return self.probe_path.read_text() if self.probe_path and self.probe_path.is_file() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the node's whole process group (raylet, workers, the node's Python): a machine lost."""
        _kill_group(self.proc.pid, signal.SIGKILL)
        _kill_tree_marked(str(self.temp_dir))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            _kill_group(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=15)
        self.kill()


@dataclass
class WorkerNode(Node):
    """A node that joined the head."""


def _start(cmd: list[str], env: dict[str, str], temp_dir: Path, log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(cwd), start_new_session=True)


def _editable_hooks(site: Path) -> list[Path]:
    """The editable install's ``.pth`` and finder of ``sweeps`` in a site-packages folder."""
    return sorted(p for p in site.iterdir() if p.name.startswith("__editable__") and "sweeps" in p.name)


def hidden_checkouts() -> list[Path]:
    """The folders a node without this project must not see: this checkout, and the one holding the venv."""
    out = [REPO]
    holder = VENV.parent
    if holder != REPO and ((holder / "sweeps").is_dir() or (holder / "pyproject.toml").is_file()):
        out.append(holder)
    return out


GCS_LOOP = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("GCS-READY", flush=True)
for line in sys.stdin:
    scope = {"ray": ray}
    try:
        exec(json.loads(line), scope)
        print("GCS-OUT " + json.dumps(scope["out"]), flush=True)
    except Exception as e:
        print("GCS-ERR " + json.dumps(repr(e)), flush=True)
"""


class GcsClient:
    """One driver connected to a cluster's GCS for the whole test (``ray.init`` once), running each probe sent to
    it: a probe costs a round trip, not a Python process and a ``ray.init`` (seconds each on 2 cores). Probes from
    several threads are answered one at a time."""

    def __init__(self, address: str, env: dict[str, str], cwd: Path) -> None:
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-c", GCS_LOOP, address], env=env, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     bufsize=0, start_new_session=True)
        self.ready, self.buf = False, b""

    def _line(self, deadline: float) -> str:
        """The driver's next ``GCS-...`` line (its other output skipped), read unbuffered so none waits unseen."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.startswith(b"GCS-"):
                    return line.decode()
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("gcs probe", 0)
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise AssertionError(f"the GCS probe driver exited ({self.proc.poll()})")
                self.buf += chunk

    def ask(self, code: str, timeout: float) -> object:
        deadline = time.monotonic() + timeout
        with self.lock:
            if not self.ready:
                if self._line(deadline) != "GCS-READY":
                    raise AssertionError("the GCS probe driver did not connect")
                self.ready = True
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(code) + "\n").encode())
            line = self._line(deadline)
        if not line.startswith("GCS-OUT "):
            raise AssertionError(f"GCS probe failed: {line}")
        return json.loads(line[len("GCS-OUT "):])

    def close(self) -> None:
        _kill_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@dataclass
class Cluster:
    """A 0-CPU head plus worker nodes that do not have this project, all on 127.0.0.1, token auth on."""

    root: Path
    home: Path  # HOME of every node and client: holds .ray/auth_token
    base_env: dict[str, str]
    head: Node | None = None
    port: int = 0
    dashboard_port: int = 0
    workers: list[WorkerNode] = field(default_factory=list)
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rc", dir="/tmp")))
    _gcs: GcsClient | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def client_env(self) -> dict[str, str]:
        """What a driver, ``ray job submit`` or ``ray status`` on this machine needs: token auth and the token."""
        return {**self.base_env, "HOME": str(self.home), "RAY_AUTH_MODE": "token"}

    def _ray(self, python: str) -> list[str]:
        return [python, "-m", "ray.scripts.scripts", "start", "--block", "--node-ip-address", "127.0.0.1",
                "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                "--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port())]

    @property
    def token(self) -> str:
        """The cluster's token (written before the head starts, as ``ray get-auth-token --generate`` does)."""
        path = self.home / ".ray" / "auth_token"
        if not path.is_file():
            import secrets

            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def start_head(self, env: dict[str, str] | None = None, dashboard: bool = True) -> Node:
        """The head: 0 CPUs (trials must go to worker nodes), dashboard and job server on 127.0.0.1, hidden from
        this project too (a Ray Job's driver gets the code from its ``--working-dir``). ``dashboard=False``: a
        head without the dashboard (a minimal image): no State API, no job server."""
        assert self.token
        self.port, self.dashboard_port = free_port(), free_port() if dashboard else 0
        extra = ["--head", "--port", str(self.port), "--num-cpus", "0", "--ray-client-server-port", str(free_port())]
        extra += (["--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port),
                   "--include-dashboard", "true"] if dashboard else ["--include-dashboard", "false"])
        for attempt in range(3):  # see start_worker: a loaded machine can miss Ray's 30 s start-up window
            self.head = self._start_node("head" if attempt == 0 else f"head-{attempt}", extra, env)
            try:
                self.head.node_id = self._wait_node(self.head, 180)
                break
            except AssertionError as exc:
                self.head.kill()
                if "timed out during startup" not in str(exc) or attempt == 2:
                    raise
        return self.head

    def node_venv(self) -> Path:
        """The test interpreter's virtualenv seen at another path (so hiding the checkout keeps the libraries)."""
        return self.tmp / "nodevenv"

    def start_worker(self, num_cpus: float, resources: dict[str, float] | None = None,
                     env: dict[str, str] | None = None, wait: bool = True, tries: int = 3) -> WorkerNode:
        """A worker node without this project (see the module docstring), joining the head.

        A loaded machine can miss Ray's fixed 30 s for a new raylet to register ("timed out during startup"), or
        its 5 s to reach the GCS at start ("Failed to connect to GCS", seen in ci19): that node is started again,
        up to ``tries`` times.
        """
        extra = ["--address", self.address, "--num-cpus", f"{num_cpus:g}", "--resources", json.dumps(resources or {})]
        name = f"w{len(self.workers)}"
        for attempt in range(tries):
            node = self._start_node(name if attempt == 0 else f"{name}-{attempt}", extra, env)
            assert isinstance(node, WorkerNode)
            self.workers.append(node)
            if not wait:
                return node
            try:
                self.wait_worker(node)
                return node
            except AssertionError as exc:
                self.workers.remove(node)
                node.kill()
                if not any(gave_up in str(exc) for gave_up in STARTUP_GAVE_UP) or attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")

    def _start_node(self, name: str, extra: list[str], env: dict[str, str] | None) -> Node:
        """``ray start --block`` in a mount namespace of its own where this project cannot be imported."""
        temp, cwd = self.tmp / name, self.tmp / f"cwd-{name}"
        cwd.mkdir(parents=True, exist_ok=True)
        venv, empty = self.node_venv(), self.tmp / "empty"
        venv.mkdir(exist_ok=True)
        empty.write_text("")
        site = next(VENV.glob("lib/python3*/site-packages"))
        q = shlex.quote
        mounts = [f"mount --bind {q(str(VENV))} {q(str(venv))}"]
        mounts += [f"mount --bind {q(str(empty))} {q(str(venv / hook.relative_to(VENV)))}"
                   for hook in _editable_hooks(site)]
        mounts += [f"mount -t tmpfs none {q(str(d))}" for d in hidden_checkouts()]
        python = str(venv / "bin" / "python")
        probe = cwd / "probe.txt"
        ray_cmd = [*self._ray(python), "--temp-dir", str(temp), *extra]
        script = " && ".join([*mounts, f"cd {q(str(cwd))}"]) + (
            f" && ({q(python)} -c 'import sweeps; print(sweeps.__file__)' > {q(str(probe))} 2>&1;"
            f" echo exit=$? >> {q(str(probe))})"
            f" && exec {' '.join(q(c) for c in ray_cmd)}")
        node_env = {**self.client_env(), **(env or {})}
        node_env["PATH"] = f"{venv / 'bin'}:{node_env.get('PATH', '/usr/bin:/bin')}"  # `python` of a Ray Job
        for k in ("PYTHONPATH", "VIRTUAL_ENV", "SWEEPS_HOME", "SWEEPS_CONF_DIR"):
            node_env.pop(k, None)
        log = self.root / f"{name}.log"
        proc = _start(["unshare", "-m", "sh", "-c", script], node_env, temp, log, cwd)
        return (Node if name == "head" else WorkerNode)(proc, temp, log, probe_path=probe)

    def wait_worker(self, node: WorkerNode, timeout: float = 180) -> str:
        node.node_id = self._wait_node(node, timeout)
        return node.node_id

    def _wait_node(self, node: Node, timeout: float) -> str:
        def ready() -> str | None:
            if not node.alive():
                raise AssertionError(f"ray node exited: {node.log_path.read_text()[-3000:]}")
            try:
                return self._node_ids().get(str(node.temp_dir))
            except (AssertionError, subprocess.TimeoutExpired):  # the GCS not answering yet (a loaded machine):
                return None  # ask again; a node that gave up ("timed out during startup") is seen above and retried

        return str(wait_until(ready, timeout, f"the node in {node.temp_dir} to join"))

    def api(self, path: str, token: str | None = None) -> dict:
        """GET the dashboard's JSON API with the cluster's token (or another one)."""
        req = urllib.request.Request(self.dashboard + path,
                                     headers={"Authorization": f"Bearer {self.token if token is None else token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())

    def nodes(self) -> list[dict]:
        """The cluster's nodes as the dashboard lists them (raylet state, resources, object store socket)."""
        try:
            return [n["raylet"] for n in self.api("/nodes?view=summary")["data"]["summary"]]
        except (OSError, KeyError, ValueError):
            return []

    def gcs(self, code: str, timeout: float = 120) -> object:
        """Run ``code`` (which sets ``out``) in this cluster's one long-lived probe driver (:class:`GcsClient`: its
        GCS, no dashboard), started on first use and again after it failed."""
        if self._gcs is None:
            self._gcs = GcsClient(self.address, self.client_env(), self.tmp)
        try:
            return self._gcs.ask(code, timeout)
        except (AssertionError, subprocess.TimeoutExpired):
            self._gcs.close()
            self._gcs = None
            raise

    def _node_ids(self) -> dict[str, str]:
        """temp dir -> node id of the alive nodes (each node's object store socket lies in its temp dir)."""
        found: dict[str, str] = {}
        if not self.dashboard_port:  # no dashboard: ask the GCS
            nodes = self.gcs("out = [n for n in ray.nodes() if n['Alive']]")
            for n in nodes if isinstance(nodes, list) else []:
                for d in [self.head, *self.workers]:
                    if d is not None and str(d.temp_dir) in n.get("ObjectStoreSocketName", ""):
                        found[str(d.temp_dir)] = n["NodeID"]
            return found
        for n in self.nodes():
            for d in [self.head, *self.workers]:
                sock = n.get("objectStoreSocketName", "")
                if d is not None and n.get("state") == "ALIVE" and str(d.temp_dir) in sock:
                    found[str(d.temp_dir)] = n["nodeId"]
        return found

    def shutdown(self) -> None:
        if self._gcs is not None:
            self._gcs.close()
            self._gcs = None
        for w in self.workers:  # SIGKILL: a test cluster has nothing to drain (SIGTERM drains up to 30 s)
            w.kill()
        if self.head is not None:
            self.head.kill()
        _kill_tree_marked(str(self.tmp))
        if os.environ.get("SWEEPS_KEEP_CLUSTER_LOGS"):  # debugging: keep the nodes' session logs
            return
        # the bind mounts lived in the nodes' namespaces and went with them; the folders are plain files now
        shutil.rmtree(self.tmp, ignore_errors=True)
