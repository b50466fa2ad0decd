"""Runs a Hydra app's task function as a Ray Train loop: the trials of the ``hydra/sweeper=sweeps`` plugin.

The one trainable that touches Hydra, because the user's task function takes the job's ``DictConfig``; like
every trainable it imports nothing from ``sweeps``. What it runs is named only by the job file that
``$SWEEPS_HYDRA_JOB`` points to, written by the sweeper in the process the user started: the environment is
trusted, a sweep config is not, so nothing in ``config`` names code. On each Train worker it:

1. rebuilds the job's config: the base config the sweeper composed for the trial's config-group options, with
   the trial's sampled values assigned (``OmegaConf.update``);
2. sets ``HydraConfig`` as a Hydra launcher would (``hydra.job.num`` and ``id`` from the trial,
   ``hydra.runtime.output_dir`` under the sweep's folder), so ``${hydra:...}`` and ``HydraConfig.get()`` work;
3. calls the task function (the ``@hydra.main`` function, unwrapped) with the config minus its ``hydra`` node,
   counting the ``ray.train.report`` calls it makes;
4. when it reported nothing, reports its return value: a number as ``{metric: value}``, a mapping as it is.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainables.common import TRIAL_ID_KEY

JOB_ENV = "SWEEPS_HYDRA_JOB"
COUNTED = "_sweeps_counted"
_reports = 0  # ray.train.report calls made in this process (install_counter)


def counted(report: Callable[..., Any]) -> Callable[..., Any]:
    """``report``, counting its calls in this module."""

    def report_and_count(*args: Any, **kwargs: Any) -> Any:
        global _reports
        _reports += 1
        return report(*args, **kwargs)

    report_and_count.__wrapped__ = report  # type: ignore[attr-defined]
    setattr(report_and_count, COUNTED, True)
    return report_and_count


def install_counter(module: Any) -> None:
    """Count the task's reports: wrap ``module.report`` (``ray.train``) once per process. Installed before the
    app's module is imported, so an app's ``from ray.train import report`` binds the counting one too."""
    if not getattr(module.report, COUNTED, False):
        module.report = counted(module.report)


def final_metrics(value: Any, metric: str, reported: bool, rank: int = 0) -> dict[str, Any] | None:
    """What to report after the task returned ``value``: None when it reported itself (the value is ignored).

    A number (anything ``float()`` takes, but not a bool or a string) is the sweep metric; a mapping is a
    metrics dict and must hold the metric. Rank 0 must give one; other ranks report ``{}`` without a value
    (``ray.train.report`` is a barrier: every rank calls it).

    Example: ``final_metrics(0.25, "loss", reported=False)`` -> ``{"loss": 0.25}``.
    """
    if reported:
        return None
    if value is None and rank != 0:
        return {}
    if isinstance(value, Mapping):
        out = {str(k): v for k, v in value.items()}
        if metric not in out:
            raise ValueError(f"the task function reported nothing and returned metrics without the sweep metric "
                             f"{metric!r}: {sorted(out)}; return {{{metric!r}: value, ...}} or a number")
        return out
    if value is None or isinstance(value, bool | str | bytes) or not hasattr(value, "__float__"):
        raise ValueError(f"the task function reported nothing (ray.train.report) and returned {value!r}; return "
                         f"the sweep metric {metric!r} as a number (or a dict of metrics), or report each epoch")
    return {metric: float(value)}  # a NaN goes through: the driver makes it the worst value and flags it


def call_task(task: Callable[[Any], Any], cfg: Any, metric: str, rank: int = 0) -> dict[str, Any] | None:
    """Run the task; the metrics to report for it (:func:`final_metrics`)."""
    before = _reports
    value = task(cfg)
    return final_metrics(value, metric, _reports > before, rank)


def load_job(path: str | None = None) -> dict[str, Any]:
    """The job file the sweeper wrote (``$SWEEPS_HYDRA_JOB``)."""
    path = path or os.environ.get(JOB_ENV)
    if not path:
        raise RuntimeError(f"trainables.hydra_task runs the trials of the Hydra sweeper (python APP.py -m "
                           f"hydra/sweeper=sweeps ...), which names the app in ${JOB_ENV}; it is not set here")
    job: dict[str, Any] = json.loads(Path(path).read_text())
    return job


def job_config(job: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
    """The trial's full Hydra config (``hydra`` node included): its groups' base config + its sampled values."""
    from omegaconf import OmegaConf

    groups = list(job["groups"])
    cfg = OmegaConf.create(job["configs"][json.dumps([config[g] for g in groups])])
    for name in job["params"]:
        if name not in groups:
            OmegaConf.update(cfg, name, config[name], merge=False)
    return cfg


def trial_overrides(job: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The job's overrides as Hydra would list them (``hydra.overrides.task``): fixed ones, then sampled."""
    sampled = [f"{k}={json.dumps(config[k]) if not isinstance(config[k], str) else config[k]}"
               for k in job["params"]]
    return [*job["fixed"], *sampled]


def enter_job(cfg: Any, trial_id: str, overrides: list[str]) -> tuple[Any, str]:
    """Set ``HydraConfig`` for this trial as a launcher does; the task's config (no ``hydra`` node) and the
    job's output folder (``hydra.sweep.dir``/``hydra.sweep.subdir``, created)."""
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals
    from omegaconf import OmegaConf, open_dict, read_write

    setup_globals()  # the ${now:}, ${hydra:} resolvers
    typed = OmegaConf.structured(HydraConf)  # set_config wants a HydraConf node; YAML gave a plain one
    OmegaConf.set_struct(typed, False)  # keys the schema lacks (hydra.env) stay
    cfg.hydra = OmegaConf.merge(typed, cfg.hydra)
    tail = trial_id.rsplit("_", 1)[-1]
    with open_dict(cfg):
        cfg.hydra.job.id = trial_id
        cfg.hydra.job.num = int(tail) if tail.isdigit() else 0
        cfg.hydra.overrides.task = overrides
    HydraConfig.instance().set_config(cfg)  # the sub-folder may read ${hydra:...}
    out = os.path.abspath(os.path.join(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)))
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = out
    HydraConfig.instance().set_config(cfg)
    task_cfg = copy.deepcopy(cfg)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg, out


def save_job_files(out: str, task_cfg: Any, overrides: list[str]) -> None:
    """``.hydra/config.yaml`` and ``overrides.yaml`` in the job's folder, as a Hydra launcher leaves them."""
    from omegaconf import OmegaConf

    folder = Path(out) / ".hydra"
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(task_cfg, folder / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), folder / "overrides.yaml")


def import_task(ref: Mapping[str, Any]) -> Callable[[Any], Any]:
    """The task function: ``ref["module"]``'s ``ref["qualname"]``, unwrapped down to the function defined at
    ``ref["line"]`` (``@hydra.main`` wraps it; the module attribute is the wrapper)."""
    obj: Any = importlib.import_module(str(ref["module"]))
    for part in str(ref["qualname"]).split("."):
        obj = getattr(obj, part)
    while hasattr(obj, "__wrapped__") and getattr(getattr(obj, "__code__", None), "co_firstlineno", None) != \
            ref.get("line"):
        obj = obj.__wrapped__
    if not callable(obj):
        raise TypeError(f"{ref['module']}.{ref['qualname']} is a {type(obj).__name__}, not a task function")
    return obj  # type: ignore[no-any-return]


def train_loop(config: dict[str, Any]) -> None:
    """Every Train worker: rebuild the trial's Hydra job and run the app's task function in it."""
    import ray.train

    install_counter(ray.train)
    job = load_job()
    task = import_task(job["task"])
    rank = ray.train.get_context().get_world_rank()
    overrides = trial_overrides(job, config)
    task_cfg, out = enter_job(job_config(job, config), str(config.get(TRIAL_ID_KEY) or ""), overrides)
    if rank == 0:
        save_job_files(out, task_cfg, overrides)
    metrics = call_task(task, task_cfg, str(job["metric"]), rank)
    if metrics is not None:
        ray.train.report(metrics)
