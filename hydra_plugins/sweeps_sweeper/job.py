"""The job file: what the trials' shim (``trainables.hydra_task``) needs to rebuild a Hydra job and run it.

The sweeper composes one base config per combination of config-group options the space holds (with Hydra's
own config loader, so defaults lists, packages and ``+``/``~`` overrides behave as in any Hydra job), and
names the task function by module, qualified name and line. The file is found through ``$SWEEPS_HYDRA_JOB``,
set in this process's environment with the app's folder on ``PYTHONPATH``: the embedded Ray's processes all
descend from this one and inherit both.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra_plugins.sweeps_sweeper.space import SpacePlan

JOB_ENV = "SWEEPS_HYDRA_JOB"  # trainables.hydra_task.JOB_ENV
JOB_FILE = "sweeps_job.json"
MAX_BASES = 64  # config-group combinations composed up front


def task_ref(task: Any) -> tuple[dict[str, Any], str]:
    """``({"module", "qualname", "line"}, folder to import it from)`` for the app's task function.

    A script run as ``python train.py`` is the module ``__main__``: the workers import it as ``train`` from
    its folder (its ``if __name__ == "__main__"`` block does not run there); ``python -m pkg.train`` keeps
    ``pkg.train``, imported from the folder above ``pkg``.
    """
    module = task.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else Path(inspect.getfile(task)).stem
    depth = len(module.split("."))
    root = Path(inspect.getfile(task)).resolve().parents[depth - 1]
    if Path(inspect.getfile(task)).name == "__init__.py":
        root = root.parent
    return {"module": module, "qualname": task.__qualname__, "line": task.__code__.co_firstlineno}, str(root)


def combinations(plan: SpacePlan) -> list[list[Any]]:
    """Every combination of the space's config-group options, in the order of ``plan.groups``."""
    options = [plan.space[g]["values"] for g in plan.groups]
    combos = [list(c) for c in itertools.product(*options)]
    if len(combos) > MAX_BASES:
        from sweeps.errors import BadInput

        raise BadInput(f"{', '.join(plan.groups)}: {len(combos)} combinations of config-group options; the "
                       f"sweeper composes each one up front and takes at most {MAX_BASES}")
    return combos


def compose_bases(loader: Any, master: Any, plan: SpacePlan) -> dict[str, str]:
    """``{json.dumps(group options): the job's config as YAML}``, composed by Hydra for each combination.

    Each is composed with the fixed overrides, the group options and a probe value of every other swept key,
    so a key the trials cannot set fails here, before Ray starts. ``hydra.sweep.dir`` is written resolved:
    a worker would evaluate ``${now:...}`` again, at another time.
    """
    from omegaconf import OmegaConf, open_dict, read_write

    elements = {p.split("=", 1)[0].lstrip("+~"): p.split("=", 1)[0] for p in plan.probes}
    others = [p for p in plan.probes if p.split("=", 1)[0].lstrip("+~") not in plan.groups]
    bases: dict[str, str] = {}
    for combo in combinations(plan):
        picks = [f"{elements[g]}={v}" for g, v in zip(plan.groups, combo, strict=True)]
        cfg = loader.load_sweep_config(master, [*plan.fixed, *picks, *others])
        with read_write(cfg.hydra), open_dict(cfg.hydra):
            cfg.hydra.sweep.dir = str(Path(str(master.hydra.sweep.dir)).resolve())
        bases[json.dumps(combo)] = OmegaConf.to_yaml(cfg)
    return bases


def write(folder: Path, ref: Mapping[str, Any], plan: SpacePlan, bases: Mapping[str, str], metric: str) -> Path:
    """The job file, in the Hydra sweep's folder (beside ``multirun.yaml``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / JOB_FILE
    job = {"task": dict(ref), "metric": metric, "groups": list(plan.groups), "params": list(plan.space),
           "fixed": list(plan.fixed), "configs": dict(bases)}
    path.write_text(json.dumps(job, indent=1))
    return path.resolve()


@contextmanager
def environment(job_path: Path, app_root: str, conf_dir: Path) -> Iterator[None]:
    """The sweep's environment: the job file, the app's folder importable, the project's own conf folder.

    ``SWEEPS_CONF_DIR`` is set (unless the user set it) because the app's own ``conf/`` in the working
    directory would otherwise be layered over sweeps' configs as a project's (its groups, say a ``scheduler/``
    of the app's own, taking the place of sweeps'). Restored afterwards.
    """
    saved = {k: os.environ.get(k) for k in (JOB_ENV, "PYTHONPATH", "SWEEPS_CONF_DIR")}
    os.environ[JOB_ENV] = str(job_path)
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = app_root + (os.pathsep + path if path else "")
    os.environ.setdefault("SWEEPS_CONF_DIR", str(conf_dir))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
