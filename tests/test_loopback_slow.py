"""Loopback by default, measured: every listening TCP socket and every bound UDP socket of an embedded sweep's
process tree (the driver, Ray's gcs_server, raylet, agents, every worker, the Train workers' torch rendezvous)
and of ``sweeps ui`` (the MLflow server and its uvicorn) is on 127.0.0.1 or ::1. Sampled with psutil over the
whole tree for the whole run. Slow tier.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import urllib.request
from dataclasses import dataclass

import pytest
from conftest import mlflow_client, trial_dirs, wait_for
from harness import Sweep

pytestmark = pytest.mark.slow


@dataclass(frozen=True, order=True)
class Listener:
    pid: int
    name: str
    ip: str
    port: int
    family: str
    kind: str  # "tcp" (listening) or "udp" (bound)


def is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip == "::1" or ip.startswith("::ffff:127.")


class Sampler:
    """Every LISTEN socket of ``pid`` and its descendants, sampled every ``interval`` seconds until stopped."""

    def __init__(self, pid: int, interval: float = 0.3) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.seen: set[Listener] = set()
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval,), daemon=True)

    def sample(self) -> None:
        import psutil

        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                cmd = p.cmdline()  # the executable's own name first: a long install path must not cut it off
                name = (" ".join([cmd[0].rsplit("/", 1)[-1], *cmd[1:]]) if cmd else p.name())[:120]
                self.names[p.pid] = name
                conns = p.net_connections(kind="inet")
            except psutil.Error:
                continue
            for c in conns:
                udp = c.type == socket.SOCK_DGRAM
                if (udp and c.laddr and not c.raddr) or c.status == psutil.CONN_LISTEN:
                    self.seen.add(Listener(p.pid, self.names[p.pid], c.laddr.ip, c.laddr.port, c.family.name,
                                           "udp" if udp else "tcp"))

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def exposed(self) -> list[Listener]:
        return sorted(x for x in self.seen if not is_loopback(x.ip))


def test_an_embedded_sweep_listens_on_loopback_only(sweep: Sweep) -> None:
    env = sweep.env
    # scheduler=median: the one end-to-end run of the median-stopping rule (one trial: it stops nothing);
    # trainable.placement_strategy=SPREAD: the one end-to-end run of a strategy other than PACK
    proc = env.popen("run", "+experiment=quickstart", "sweep.num_samples=1", "scheduler=median",
                     "trainable.num_workers=2", "trainable.params.epochs=3", "report.enabled=false",
                     "trainable.placement_strategy=SPREAD", "cluster.worker_start_timeout_s=60")
    with Sampler(proc.pid) as sampler:
        out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    names = " | ".join(sorted({x.name for x in sampler.seen}))
    assert any("gcs_server" in x.name for x in sampler.seen), names
    assert any("raylet" in x.name for x in sampler.seen), names
    # the Train workers' own listeners: core-worker gRPC plus the torch rendezvous (TCPStore) on rank 0
    train = [x for x in sampler.seen if "RayTrainWorker" in x.name]
    assert len({x.pid for x in train}) == 2 and len(train) >= 3, train
    assert len(sampler.seen) >= 10, sampler.seen
    assert not sampler.exposed(), "non-loopback listeners:\n" + "\n".join(map(str, sampler.exposed()))
    # the rendezvous the workers used (reported by rank 0) is one of the Train workers' sampled listeners
    rec = Sweep.only(env).record()
    assert rec["scheduler"] == "median"
    # what the sweep says about its listeners: the record (the report's line) and the parent run's tag
    assert rec["listeners"].startswith("loopback only ("), rec["listeners"]
    tags = mlflow_client(env.tracking_uri).get_run(rec["parent_run_id"]).data.tags
    assert tags["sweeps.listeners"] == rec["listeners"]
    (trial_dir,) = trial_dirs(rec["experiment_dirs"][0])
    first = json.loads((trial_dir / "result.json").read_text().splitlines()[0])
    assert first["sys/placement"] == "SPREAD", "the workers' group has the configured strategy"
    host, port = first["sys/rendezvous"].rsplit(":", 1)
    assert is_loopback(host), first["sys/rendezvous"]
    store = [x for x in train if x.port == int(port) and x.kind == "tcp"]
    assert store and all(is_loopback(x.ip) for x in store), (first["sys/rendezvous"], train)


def test_sweeps_ui_listens_on_loopback_only(sweep: Sweep) -> None:
    from sweeps.tracking.server import free_port, healthy

    env = sweep.env
    port = free_port()
    proc = env.popen("ui", "--port", str(port))
    try:
        with Sampler(proc.pid, interval=0.1) as sampler:  # from its start to its exit
            wait_for(lambda: healthy(f"http://127.0.0.1:{port}"), timeout=180, interval=0.2, what="the MLflow UI")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:  # a page served
                assert page.status == 200
            proc.send_signal(signal.SIGTERM)  # sweeps ui stops its server and exits
            proc.wait(timeout=60)
        assert any(x.port == port for x in sampler.seen), sampler.seen
        assert not sampler.exposed(), "non-loopback listeners:\n" + "\n".join(map(str, sampler.exposed()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
