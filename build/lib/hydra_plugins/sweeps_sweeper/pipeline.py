"""The sweeper's side of the ``sweeps`` pipeline: its options as ``sweeps`` overrides, then prepare and execute.

Everything goes through the same checks as ``python -m sweeps run``: composition from the project's conf
folder, the override rules (no ``security.*``, no ``hydra.*``), the ``_target_`` allowlist, the trainable
contract. The only difference is the search space: it comes from the Hydra sweep overrides, set on the
composed config, since a Hydra key may hold dots (``model.lr``) that an override would nest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

TRAINABLE = "hydra_app"  # conf/trainable/hydra_app.yaml
LOOP = "trainables.hydra_task.train_loop"
# hydra.sweeper.<option> -> the sweeps key it sets
KEYS = {"num_samples": "sweep.num_samples", "metric": "sweep.metric", "mode": "sweep.mode",
        "searcher": "searcher", "scheduler": "scheduler", "num_workers": "trainable.num_workers",
        "max_concurrent_trials": "sweep.max_concurrent_trials", "epochs": "trainable.params.epochs"}
GROUPS = ("searcher", "scheduler")  # options that pick a config group's option: no quotes
RESERVED = ("search_space", "trainable", "trainable.loop", "cluster")


def quote(value: str) -> str:
    """A Hydra override value that stays one string whatever it holds (paths, ``val/acc``)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sweeps_overrides(options: Mapping[str, Any], name: str, report_dir: str, extra: Sequence[str]) -> list[str]:
    """The ``sweeps`` overrides for the sweeper's options: the app's trainable, the Hydra job's name as the
    sweep's, the set options, the report beside Hydra's multirun output, then ``hydra.sweeper.overrides``."""
    from sweeps.errors import BadInput

    out = [f"trainable={TRAINABLE}", f"sweep.name={quote(name)}", f"report.dir={quote(report_dir)}"]
    for option, key in KEYS.items():
        value = options.get(option)
        if value is None:
            continue
        out.append(f"{key}={value}" if option in GROUPS or not isinstance(value, str) else f"{key}={quote(value)}")
    bad = [o for o in extra if o.lstrip("+~").split("=", 1)[0].split("@")[0].strip() in RESERVED
           or o.lstrip("+~").startswith("search_space.")]
    if bad:
        raise BadInput(f"hydra.sweeper.overrides: {', '.join(map(repr, bad))} cannot be set here: the search space "
                       f"comes from the Hydra sweep overrides (lr=interval(0.001, 0.1)), the trainable is the app "
                       f"and the cluster the embedded Ray")
    return [*out, *extra]


def epochs(options: Mapping[str, Any], base_yaml: str) -> int | None:
    """The trials' report budget: ``hydra.sweeper.epochs``, else, under a scheduler that stops trials early, the
    app config's top-level ``epochs`` when it is an int. Under FIFO nothing is stopped early and a task may
    report once (its return value), so the app's ``epochs`` is not taken for a report count there."""
    from omegaconf import DictConfig, OmegaConf

    if options.get("epochs") is not None:
        return int(options["epochs"])
    if options.get("scheduler") in (None, "fifo"):
        return None
    cfg = OmegaConf.create(base_yaml)
    value = cfg.get("epochs") if isinstance(cfg, DictConfig) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def prepare(overrides: Sequence[str], space: Mapping[str, Any]) -> Any:
    """The sweep, composed and validated by ``sweeps.api`` as ``sweeps run`` does, with the sweeper's search
    space, plus what only the sweeper needs (its task loop on the embedded Ray, a report budget); raises
    BadInput."""
    from sweeps.api import calls
    from sweeps.errors import BadInput

    spec = calls.prepare_sweep(overrides, space)
    if spec.scheduler.get("max_t", 0) is None:
        raise BadInput(f"hydra.sweeper.epochs: scheduler={spec.scheduler_name} needs the most reports a "
                       f"trial makes (its max_t); set hydra.sweeper.epochs=N, or give the app's config a "
                       f"top-level int `epochs`")
    if spec.trainable.loop != LOOP or spec.cluster.mode != "local":
        raise BadInput(f"the Hydra sweeper runs {LOOP} on the embedded Ray; got trainable.loop="
                       f"{spec.trainable.loop!r}, cluster.mode={spec.cluster.mode!r}")
    return spec


def run(spec: Any, overrides: Sequence[str]) -> Any:
    """Run the prepared sweep through ``sweeps.api``; its ``SweepResult``, logged as ``sweeps run`` prints it."""
    from sweeps.api import calls
    from sweeps.cli.run import format_outcome

    result = calls.run_prepared(spec, overrides, hosted=False)
    log.info("%s", format_outcome(result.outcome))
    return result
