"""A user's script as a Ray Train loop: ``train_loop(config)`` runs it, unchanged, on every Train worker.

Each worker runs the script as ``python PATH ARGS`` would, in this process: ``sys.argv`` built from the fixed
arguments and the trial's values in the parser's own spelling, the working directory and the output option in
a folder of its own, the launcher's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...)
as ``torchrun`` leaves it, and Ray Train's process group standing in for the one the script sets up
(:mod:`trainables.script.hooks`). Reports, checkpoints and resume follow the framework
(:mod:`trainables.script.session`); the script's output goes to its console and to a log whose last lines a
failure quotes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

from trainables import preemption
from trainables.script import hooks
from trainables.script.session import META_DIR, Reporter, read_state
from trainables.script.spec import SPEC_KEY, ScriptSpec, argv

log = logging.getLogger(__name__)

TAIL_LINES = 25
RESTORED = "_restored"  # inside the work folder: a Lightning / HF checkpoint handed back for resume
OWNER = "owner"  # in each rank's run folder: "HOST PID" of the worker running it
WORK = "work"  # inside a checkpoint: the plain script's files, as they were in its folder


class ScriptFailed(RuntimeError):
    """The script exited non-zero or raised; the message quotes its last lines of output."""


def run_root() -> str:
    """Where script runs keep their folders on this node (Ray's temp folder when set)."""
    base = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
    return os.path.join(base, "sweeps-script")


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train loop: run the script of ``config[SPEC_KEY]`` with the trial's values."""
    import ray.train

    config = dict(config)
    spec = ScriptSpec.from_dict(config.pop(SPEC_KEY))
    ctx = ray.train.get_context()
    rank, world, local_rank = ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank()
    trial = str(config.get("_trial_id") or "trial")
    prune_stale(run_root())
    folder = os.path.join(run_root(), f"{trial}-{uuid.uuid4().hex[:8]}", f"rank{rank}")
    work = os.path.join(folder, WORK)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(folder, OWNER), "w") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}")
    path = script_file(spec, folder)
    resume, spot = restore(ray.train.get_checkpoint(), spec, work, trial)
    lr = config.get(spec.lr) if spec.lr else None
    state = hooks.RunState(spec.framework, work, resume if spec.framework in ("lightning", "hf") else None,
                           float(lr) if isinstance(lr, int | float) and not isinstance(lr, bool) else None,
                           resuming=resume is not None)
    resume_arg = resume if spec.framework not in ("lightning", "hf") else None
    args = argv(spec, config, output_dir=work if spec.output else None, resume_from=resume_arg)
    log_path = os.path.join(folder, "script.log")
    log.info("rank %d runs %s (log %s)", rank, " ".join(args), log_path)
    every = int(config.get("checkpoint_every", 1) or 0)
    with Reporter(spec.framework, spec.metric, rank, world, every, log_path if rank == 0 else None,
                  spot) as rep:
        save = _plain_save(spec, state, rank)
        with contextlib.ExitStack() as stack:
            epochs = hooks.install(stack, rep, state, _source(path, spec.entry), save)
            stack.enter_context(_launched(args, work, path, rank, world, local_rank, ctx))
            stack.enter_context(_threads(config))
            stack.enter_context(_teed(log_path))
            _run(spec, path, log_path)
        if epochs is not None:
            rep.flush(save)  # the last epoch's figures, with the script's last state
        rep.check_logged()
    shutil.rmtree(os.path.dirname(folder), ignore_errors=True)


def prune_stale(root: str) -> None:
    """Remove the run folders of workers that are gone from this host (a trial stopped early or killed never
    cleans up after itself): each folder names its owner's host and process."""
    host = socket.gethostname()
    try:
        runs = os.listdir(root)
    except OSError:
        return
    for run in runs:
        ranks = [os.path.join(root, run, r) for r in _listdir(os.path.join(root, run))]
        owners = [_owner(os.path.join(r, OWNER)) for r in ranks]
        if owners and all(o is not None and o[0] == host and not _alive(o[1]) for o in owners):
            shutil.rmtree(os.path.join(root, run), ignore_errors=True)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _owner(path: str) -> tuple[str, int] | None:
    try:
        with open(path) as f:
            host, pid = f.read().split()
        return host, int(pid)
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """As ``sweeps.lease.pid_alive`` (written out: trainables import nothing from sweeps)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def script_file(spec: ScriptSpec, folder: str) -> str | None:
    """The script to run on this node: its own file, or (a node without the project folder) the copy of its
    text the sweep carries, written into the run folder."""
    if spec.path is None:
        return None
    if os.path.isfile(spec.path):
        return spec.path
    if spec.source is None:
        raise FileNotFoundError(f"script {spec.path} is not on this node and the sweep carries no copy of it")
    copy = os.path.join(folder, os.path.basename(spec.path))
    with open(copy, "w") as f:
        f.write(spec.source)
    return copy


def _source(path: str | None, entry: str | None = None) -> str:
    """The script's text (an entry point's module file): which hooks it needs is read from it."""
    if path is None:
        import importlib.util

        found = importlib.util.find_spec(str(entry).partition(":")[0])
        path = found.origin if found is not None else None
        if path is None or not os.path.isfile(path):
            return "mlflow SummaryWriter accelerate"  # unreadable: every capture hook, to miss no metric
    with open(path, errors="replace") as f:
        return f.read()


def restore(checkpoint: Any, spec: ScriptSpec, work: str, trial: str) -> tuple[str | None, preemption.Watch]:
    """Copy the trial's checkpoint into the run's folder. Returns what the script resumes from (the framework's
    checkpoint (Lightning, HF), the saved state (a path option), ``""`` for a switch; None: a fresh start), and
    the start's preemption watch, with the count the checkpoint carries (:mod:`trainables.preemption`)."""
    if checkpoint is None:
        return None, preemption.Watch.start(None, trial)
    with checkpoint.as_directory() as src:
        spot = preemption.Watch.start(os.path.join(src, META_DIR), trial)
        return _restored(src, spec, work), spot


def _restored(src: str, spec: ScriptSpec, work: str) -> str | None:
    """:func:`restore`'s copy, from the checkpoint's local folder ``src``."""
    meta = read_state(src)
    if not meta:
        log.warning("checkpoint %s was not written by the script adapter: the script starts afresh", src)
        return None
    if spec.framework in ("lightning", "hf"):
        dest = os.path.join(work, RESTORED)
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns(META_DIR), dirs_exist_ok=True)
        return os.path.join(dest, meta["resume"]) if meta.get("resume") else None
    if os.path.isdir(os.path.join(src, WORK)):
        shutil.copytree(os.path.join(src, WORK), work, dirs_exist_ok=True)
    if not spec.resume:
        log.warning("%s takes no resume option: it starts afresh (its files are restored in its folder)", spec.name)
        return None
    if spec.resume in spec.switches:
        return ""
    return os.path.join(work, meta["resume"]) if meta.get("resume") else None


def _plain_save(spec: ScriptSpec, state: hooks.RunState, rank: int) -> Any:
    """A plain or Accelerate script's checkpoint: the state it saved last (what its resume option takes), or
    its whole folder (a resume switch reads its own files there)."""
    def save(folder: str) -> str | None:
        if rank != 0 or not os.listdir(state.work):  # rank 0's files are the trial's
            return None
        dest = os.path.join(folder, WORK)
        if state.last_saved and spec.resume and spec.resume not in spec.switches:
            src = os.path.join(state.work, state.last_saved)
            target = os.path.join(dest, state.last_saved)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(src):
                shutil.copytree(src, target)
            elif os.path.isfile(src):
                shutil.copy2(src, target)
            return state.last_saved
        shutil.copytree(state.work, dest, ignore=shutil.ignore_patterns(RESTORED))
        return None

    return save


@contextlib.contextmanager
def _launched(args: list[str], work: str, path: str | None, rank: int, world: int, local_rank: int,
              ctx: Any) -> Iterator[None]:
    """``sys.argv``, the working directory, ``sys.path[0]`` and the launcher's variables as ``torchrun`` sets
    them, for the length of the run."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank),
           "LOCAL_WORLD_SIZE": str(ctx.get_local_world_size()), "GROUP_RANK": str(ctx.get_node_rank()),
           "NODE_RANK": str(ctx.get_node_rank()), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world)}
    env.setdefault("MASTER_ADDR", os.environ.get("MASTER_ADDR", "127.0.0.1"))
    old_env = {k: os.environ.get(k) for k in env}
    old_argv, old_cwd, old_path = sys.argv, os.getcwd(), list(sys.path)
    os.environ.update(env)
    sys.argv = list(args)
    if path is not None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    os.chdir(work)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        sys.argv, sys.path[:] = old_argv, old_path
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _threads(config: dict[str, Any]) -> Iterator[None]:
    """torch's threads sized to the worker's CPUs, as ``torchrun`` does (``OMP_NUM_THREADS``): two workers of
    a trial on a small box would otherwise each take every core (measured: 4x slower epochs on 2 cores)."""
    import torch

    n = max(1, int(config.get("torch_threads") or config.get("cpus_per_worker") or 1))
    old_n, old_env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    try:
        yield
    finally:
        torch.set_num_threads(old_n)
        if old_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)


class _Tee(io.TextIOBase):
    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for stream in self.streams:
            try:
                stream.write(s)
            except (OSError, ValueError):
                pass
        return len(s)

    def flush(self) -> None:
        for stream in self.streams:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _teed(log_path: str) -> Iterator[None]:
    """The script's stdout and stderr to the console (the worker's log) and to ``log_path``."""
    with open(log_path, "a", buffering=1) as f:
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(out, f), _Tee(err, f)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err


def tail(log_path: str, lines: int = TAIL_LINES) -> str:
    try:
        with open(log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def _run(spec: ScriptSpec, path: str | None, log_path: str) -> None:
    """The script's ``__main__``, or its entry point; a non-zero exit or an error quotes the last lines."""
    try:
        if path is not None:
            runpy.run_path(path, run_name="__main__")
        else:
            module, _, func = str(spec.entry).partition(":")
            import importlib

            getattr(importlib.import_module(module), func or "main")()
    except SystemExit as exc:
        if exc.code in (None, 0):
            return
        raise ScriptFailed(f"{spec.name} exited with status {exc.code}; its last lines:\n{tail(log_path)}") from None
    except Exception as exc:
        raise ScriptFailed(f"{spec.name} failed ({type(exc).__name__}: {exc}); its last lines:\n"
                           f"{tail(log_path)}") from exc
