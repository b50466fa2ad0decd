"""Lever ``site_preload``: the embedded Ray's worker processes import torch and Ray Train *before* they register.

The raylet's own preload (``preload_python_modules``, :mod:`sweeps.execution.levers.raylet_config`) runs in
``default_worker.py`` after ``ray._private.worker.connect()``: a process is leasable while it still imports
torch, and the raylet leases its newest idle process first, so a trial start's controller or workers land on a
process still warming up and wait for its imports (benchmarks/results/startup_profile.txt). Here the imports
run from a ``sitecustomize`` module on the ``PYTHONPATH`` the raylet's processes inherit from this driver, so
a process registers (and can be leased) only once warm. It acts only in a Ray worker process of the ``WORKER``
kind (``default_worker.py --worker-type=WORKER``: Ray's internal command line, read here); every other Python
process that inherits the path (Ray's daemons, a trial's own subprocesses) only passes through it, and a
``sitecustomize`` further along the path still runs. Fallback: the raylet's own preload.
"""

from __future__ import annotations

import os
import tempfile

from sweeps.execution.levers.core import Lever, first, importable, source_says

MODULES_ENV = "SWEEPS_SITE_PRELOAD"  # the modules to import, separated by commas
WORKER_SCRIPT = "ray._private.workers.default_worker"

SITECUSTOMIZE = '''\
"""sweeps' warm start (sweeps.execution.levers.site_preload): a Ray worker imports its preload before it
registers with the raylet. Any other process: nothing, then the next sitecustomize on the path."""
import os
import sys


def _sweeps_preload():
    argv = getattr(sys, "argv", None) or [""]
    if not argv[0].endswith("default_worker.py"):
        return
    kinds = [a.split("=", 1)[1] for a in argv if a.startswith("--worker-type=")]
    if kinds and kinds[-1] != "WORKER":
        return
    for name in filter(None, os.environ.get("SWEEPS_SITE_PRELOAD", "").split(",")):
        try:
            __import__(name)
        except Exception:  # the worker imports it again when it needs it, and fails there visibly
            pass


def _next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_sweeps_preload()
_next_sitecustomize()
'''


def _probe() -> str | None:
    return first(importable((WORKER_SCRIPT,)),
                 source_says(WORKER_SCRIPT, '"--worker-type"', "ray._private.worker.connect(", "worker.main_loop()"))


LEVER = Lever(name="site_preload", package="ray", checked=("2.60.",),
              what="the embedded Ray's processes import torch before they register (leasable only once warm)",
              fallback="the raylet's preload_python_modules: a process is leasable while it still imports",
              probe=_probe)


_folder: str | None = None  # this process's installed folder (the embedded Ray it runs)


def ensure(modules: tuple[str, ...]) -> bool:
    """Where the lever applies, :func:`install` once for this process's embedded Ray; False where it is off
    (the raylet's own preload then)."""
    from sweeps.execution.levers import core

    global _folder
    if not core.applies(LEVER):
        return False
    if _folder is None:
        _folder = install(modules)
    return True


def remove() -> None:
    """:func:`uninstall` what :func:`ensure` installed (the embedded Ray stopped)."""
    global _folder
    if _folder is not None:
        uninstall(_folder)
        _folder = None


def install(modules: tuple[str, ...], root: str | None = None) -> str:
    """Write the ``sitecustomize`` into a folder of its own and put it first on this process's ``PYTHONPATH``
    (every process the embedded Ray starts inherits it); returns the folder. Call before ``ray.init``."""
    folder = tempfile.mkdtemp(prefix="sweeps-site-", dir=root)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([folder, *([path] if path else [])])
    os.environ[MODULES_ENV] = ",".join(modules)
    return folder


def uninstall(folder: str) -> None:
    """Take the folder off this process's ``PYTHONPATH`` again (the embedded Ray stopped)."""
    import shutil

    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != folder]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)
    os.environ.pop(MODULES_ENV, None)
    shutil.rmtree(folder, ignore_errors=True)
