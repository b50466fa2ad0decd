"""The Train -> Tune bridge: a private socket from a trial's Train controller to its driver, with an ack.

docs/ray.md, "The Train -> Tune bridge". The Train controller runs on the driver's node (Train V2 pins it
there), so the channel is a Unix socket in a 0700 folder, opened by the driver; the controller proves
itself with a random token. No actor, no extra process. Each Train report is sent with its persisted
checkpoint, and the controller's ``after_report`` waits until the driver's ``ray.tune.report`` has returned
(Tune has copied the checkpoint): Train is never more than one report ahead of Tune, so with Train's
``num_to_keep=1`` the checkpoint Tune copies is always Train's latest, which Train never deletes.

Also here: the seeding wrapper that makes ``ray.train.get_checkpoint()`` return the checkpoint Tune handed
the trial (a PBT donor's, a retry's, a restored trial's), the GPU memory cap of a packed trial's worker
(``trainable.pack``), and a checkpoint copy that hard-links local files.
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
import posixpath
import secrets
import select
import shutil
import socket
import struct
import tempfile
import time
from typing import Any

from sweeps.config.spec import PACK_KEY
from sweeps.config.targets import import_dotted
from sweeps.execution.train import stages, startup

log = logging.getLogger(__name__)

SEED_KEY = "_sweeps_seed"  # metrics key of the one seeding report; the bridge drops it
SEED_CONFIG = "_sweeps_seed_from"  # train_loop_config: the ray.train.Checkpoint to seed the run with
LOOP_CONFIG = "_sweeps_loop"  # train_loop_config: the user's loop, as a dotted path
RUN_DIR_CONFIG = "_sweeps_run_dir"  # train_loop_config: this Train run's folder (a URI): where the seed goes
ACK_TIMEOUT_ENV = "SWEEPS_BRIDGE_ACK_TIMEOUT_S"
ACK_TIMEOUT_S = 900.0  # a driver blocked this long in ray.tune.report is stuck: fail the trial
_ACK = b"\x06"
_HEADER = struct.Struct("!Q")


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("the bridge's peer closed the channel")
        buf += chunk
    return bytes(buf)


def _readable(sock: socket.socket, timeout: float) -> bool:
    ready, _, _ = select.select([sock], [], [], max(0.0, timeout))
    return bool(ready)


class Channel:
    """Driver side: listens on a private Unix socket; one Train controller connects per ``fit()``."""

    def __init__(self) -> None:
        root = tempfile.gettempdir()
        # mode 0700: only this user may connect; a Unix socket's path must stay under ~100 bytes
        self._dir = tempfile.mkdtemp(prefix="sweeps-bridge-", dir=root if len(root) < 64 else "/tmp")
        self.address = os.path.join(self._dir, "s")
        self.token = secrets.token_bytes(16)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(4)
        self._conn: socket.socket | None = None

    def _accept(self, timeout: float) -> bool:
        if not _readable(self._server, timeout):
            return False
        conn, _ = self._server.accept()
        conn.settimeout(60)
        try:
            ok = secrets.compare_digest(_read_exactly(conn, len(self.token)), self.token)
        except (OSError, EOFError):
            ok = False
        if not ok:
            conn.close()
            return False
        if self._conn is not None:  # a newer controller of this trial (should not happen): it wins
            self._conn.close()
        self._conn = conn
        return True

    def receive(self, timeout: float) -> tuple[dict[str, Any], Any] | None:
        """The next ``(metrics, checkpoint)`` from the controller, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        if self._conn is None and not self._accept(timeout):
            return None
        if self._conn is None or not _readable(self._conn, deadline - time.monotonic()):
            return None
        try:
            (size,) = _HEADER.unpack(_read_exactly(self._conn, _HEADER.size))
            item: tuple[dict[str, Any], Any] = pickle.loads(_read_exactly(self._conn, size))
        except (OSError, EOFError):  # the controller ended (or died): nothing more comes on this one
            self._conn.close()
            self._conn = None
            return None
        return item

    def ack(self) -> None:
        """Tell the controller that Tune has taken the last item (its checkpoint may now be deleted)."""
        if self._conn is not None:
            try:
                self._conn.sendall(_ACK)
            except OSError:
                pass

    def close(self) -> None:
        """Close the channel; a controller waiting for an ack gets an error (and ends its run)."""
        for s in (self._conn, self._server):
            if s is not None:
                s.close()
        self._conn = None
        shutil.rmtree(self._dir, ignore_errors=True)


def bridge_callback(address: str, token: bytes, *, driver_node: str | None) -> Any:
    """The Train ``UserCallback`` that sends each report to the driver's :class:`Channel` and waits.

    It carries the trial driver's node (``driver_node``; None only outside Ray, in unit tests): the controller
    checks on its first report that it runs there (a Unix socket reaches only its own host, and two Ray nodes
    may share one host, where a misplaced controller would reach a socket it must not rely on) and fails the run
    with a clear error if not.
    """
    from ray.train.v2.api.callback import UserCallback

    class Bridge(UserCallback):  # type: ignore[misc]
        """Runs in the Train controller (pickled there; the socket is opened on the first report)."""

        def __init__(self) -> None:
            self.address, self.token, self.driver_node = address, token, driver_node
            self.timeout = float(os.environ.get(ACK_TIMEOUT_ENV) or ACK_TIMEOUT_S)
            self._sock: socket.socket | None = None

        def __getstate__(self) -> dict[str, Any]:
            return {**self.__dict__, "_sock": None}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.__dict__.update(state)
            self.up = time.time()  # unpickled by the Train controller as its actor starts: the controller is up

        def controller_started(self, at: float) -> None:
            """A controller run in the trial's own process (the lean trainer's) was made at ``at``."""
            self.up = at

        def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
            if SEED_KEY in metrics[0]:
                return  # the seeding report: Tune already has this checkpoint
            if self._sock is None:
                if self.driver_node is not None:
                    _check_node(self.driver_node)
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock.connect(self.address)
                self._sock.sendall(self.token)
                _send(self._sock, (startup.add(metrics[0], controller=getattr(self, "up", time.time())), checkpoint))
            else:
                _send(self._sock, (dict(metrics[0]), checkpoint))
            if not _readable(self._sock, self.timeout) or _read_exactly(self._sock, 1) != _ACK:
                raise TimeoutError(f"the trial's driver did not take a report within {self.timeout:g} s "
                                   f"(${ACK_TIMEOUT_ENV}); ending the Train run")

    return Bridge()


def _check_node(driver_node: str) -> None:
    """In the Train controller: refuse to bridge from another node than the trial driver's."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    if here != driver_node:
        raise RuntimeError(
            f"the Train controller runs on node {here}, not on its trial driver's node {driver_node}: the "
            f"Ray {ray.__version__} installed no longer places the controller with its driver, which the "
            "Train -> Tune bridge needs (docs/ray.md). Install the Ray version pinned in pyproject.toml.")


def copy_checkpoint(src_path: str, src_fs: Any, dest_path: str, dest_fs: Any) -> None:
    """Copy a checkpoint folder. Local to local: hard links (checkpoint files are written once and never
    changed in place; deleting either copy unlinks only its own names). Within one object store:
    server-side copies. Else: pyarrow streams the files."""
    import pyarrow.fs as pafs

    kinds = {getattr(fs, "type_name", "") for fs in (src_fs, dest_fs)}
    if kinds == {"local"}:
        try:
            shutil.copytree(src_path, dest_path, copy_function=os.link, dirs_exist_ok=True)
            return
        except OSError:  # another device, or links not allowed: copy instead
            shutil.rmtree(dest_path, ignore_errors=True)
    dest_fs.create_dir(dest_path, recursive=True)
    if kinds != {"local"} and src_fs.equals(dest_fs):
        root = src_path.rstrip("/") + "/"
        for info in src_fs.get_file_info(pafs.FileSelector(src_path, recursive=True)):
            if info.type == pafs.FileType.File:
                src_fs.copy_file(info.path, posixpath.join(dest_path, info.path[len(root):]))
        return
    pafs.copy_files(src_path, dest_path, source_filesystem=src_fs, destination_filesystem=dest_fs)


def _seed(seed: Any, run_dir: str) -> None:
    """Report ``seed`` once, so Train registers it as this run's latest checkpoint on every rank (copied into
    the run's folder ``run_dir``, a URI)."""
    import ray.train
    from ray.train.collective import barrier

    from sweeps import uris

    rank = ray.train.get_context().get_world_rank()
    fs, root = uris.filesystem(run_dir)

    def upload(ckpt: Any, dir_name: str) -> Any:
        dest = posixpath.join(root, dir_name)
        if rank == 0:  # one copy; the other ranks name the same folder
            copy_checkpoint(ckpt.path, ckpt.filesystem, dest, fs)
        return ray.train.Checkpoint(dest, fs)

    ray.train.report({SEED_KEY: 1}, checkpoint=seed, checkpoint_upload_fn=upload)
    barrier()  # rank 0's copy is complete before any rank reads it


def cap_gpu_memory(pack: int) -> float | None:
    """A packed trial's worker (``trainable.pack=K``, K trials share a GPU): keep 1/K of the GPU's memory, so one
    trial that grows cannot take its neighbours' memory; returns the fraction set (None: nothing to cap).

    torch's caching allocator refuses to grow past it (an out-of-memory error in this trial only); the CUDA
    context itself (a few hundred MB per process) is outside the cap. Once per worker, before the user's loop.
    """
    if pack <= 1:
        return None
    import torch

    if not torch.cuda.is_available():
        log.warning("trainable.pack=%d: this worker sees no CUDA device; its GPU memory is not capped", pack)
        return None
    device = torch.cuda.current_device()  # a packed worker sees one GPU: the one Ray gave it a share of
    fraction = 1.0 / pack
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    total = torch.cuda.get_device_properties(device).total_memory
    # a warning: a Train worker's root logger is Python's default (WARNING), and this line is worth finding in
    # the worker's log when a trial runs out of GPU memory
    log.warning("trainable.pack=%d: this worker keeps %.0f%% of GPU %d's memory (%.2f of %.2f GiB; "
             "torch.cuda.set_per_process_memory_fraction)", pack, 100 * fraction, device,
             fraction * total / 1024 ** 3, total / 1024 ** 3)
    return fraction


def seeded_loop(config: dict[str, Any], *, in_process: bool = False) -> None:
    """Every Train worker runs this: seed the run with the trial's Tune checkpoint, then the user's loop.

    Seeding is skipped when Train already has a checkpoint (a restarted worker group resumes from its own
    latest), so ``ray.train.get_checkpoint()`` is the checkpoint to resume from in both cases. ``in_process``: the
    loop runs in the trial's own process (:mod:`sweeps.execution.train.inprocess`), which already answers
    ``get_checkpoint()`` with the trial's checkpoint and has no worker group of its own to wait for.
    """
    import ray.train

    config = dict(config)
    began = time.time()
    rank = ray.train.get_context().get_world_rank()
    stages.stamp(str(config.get("_trial_id")), "loop_start", rank=rank)
    undo = startup.arm_worker(rank, began, SEED_KEY, group=not in_process)  # before the loop's import (it may
    # bind report early)
    try:
        cap_gpu_memory(int(config.pop(PACK_KEY, 1) or 1))
        seed = config.pop(SEED_CONFIG, None)
        run_dir = config.pop(RUN_DIR_CONFIG, None)
        loop = import_dotted(str(config.pop(LOOP_CONFIG)))
        if seed is not None and run_dir and ray.train.get_checkpoint() is None:
            _seed(seed, run_dir)
        if inspect.signature(loop).parameters:
            loop(config)
        else:
            loop()
    finally:
        undo()
