"""``SweepsSweeper``: a Hydra sweeper whose jobs are the trials of one ``sweeps`` sweep (Ray Tune + Train).

Hydra hands it the sweep overrides; it maps them to a search space (:mod:`.space`), composes the app's base
configs and writes the job file (:mod:`.job`), and runs the sweep in this process through ``sweeps``' own
pipeline (:mod:`.pipeline`). No Hydra launcher is involved: each trial runs the task function on the Train
workers of a ``TorchTrainer`` (``trainables.hydra_task``). Exit codes are those of ``python -m sweeps run``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


class SweepsSweeper(Sweeper):
    """``hydra/sweeper=sweeps``; its options are :class:`~hydra_plugins.sweeps_sweeper.config.SweepsSweeperConf`."""

    def __init__(self, params: dict[str, str] | None = None, overrides: list[str] | None = None,
                 **options: Any) -> None:
        super().__init__()
        self.params = dict(params or {})
        self.extra = [str(o) for o in overrides or []]
        self.options = dict(options)
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def _ready(self) -> tuple[HydraContext, DictConfig, TaskFunction]:
        if self.hydra_context is None or self.config is None or self.task_function is None:
            raise RuntimeError("SweepsSweeper.setup() was not called")
        return self.hydra_context, self.config, self.task_function

    def _is_group(self, override: Any) -> bool:
        """The override picks a config group's option: composing with its first value lists the group among
        ``hydra.runtime.choices``."""
        values = list(override.sweep_string_iterator())
        if not values or not all(isinstance(v, str) for v in override.sweep_iterator()):
            return False
        context, config, _ = self._ready()
        cfg = context.config_loader.load_sweep_config(config, [f"{override.get_key_element()}={values[0]}"])
        return override.key_or_group in cfg.hydra.runtime.choices

    def sweep(self, arguments: list[str]) -> Any:
        """Run the sweep; returns the ``sweeps.ops.run.Outcome``. Raises ``SystemExit`` with ``sweeps run``'s
        exit code when that is not 0 (2: bad input, 1: no trial succeeded or stalled, 130: interrupted)."""
        from sweeps.errors import SweepsError

        try:
            outcome = self._sweep(arguments)
        except SweepsError as exc:
            from sweeps.config.redaction import scrub

            log.error("error: %s", scrub(str(exc)))
            raise SystemExit(exc.exit_code) from None
        if outcome.exit_code:
            raise SystemExit(outcome.exit_code)
        return outcome

    def _plan(self, arguments: list[str]) -> Any:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from hydra_plugins.sweeps_sweeper import space
        from sweeps.errors import BadInput

        context, _, _ = self._ready()
        parser = OverridesParser.create(config_loader=context.config_loader)
        parsed = parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()), *arguments])
        try:
            plan = space.plan(parsed, self._is_group, discrete=self.options.get("searcher") == "grid")
        except space.SweepSyntaxError as exc:
            raise BadInput(str(exc)) from None
        if not plan.space:
            raise BadInput("hydra/sweeper=sweeps: no sweep override; sweep at least one key, e.g. "
                           "'lr=tag(log, interval(1e-4, 1e-1))', 'hidden=32,64' or 'model=small,large'")
        return plan

    def _sweep(self, arguments: list[str]) -> Any:
        from hydra_plugins.sweeps_sweeper import job, pipeline
        from sweeps import paths

        context, config, task = self._ready()
        plan = self._plan(arguments)
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(config, sweep_dir / "multirun.yaml")
        bases = job.compose_bases(context.config_loader, config, plan)
        ref, root = job.task_ref(task)
        options = {**self.options, "epochs": pipeline.epochs(self.options, next(iter(bases.values())))}
        overrides = pipeline.sweeps_overrides(options, str(config.hydra.job.name), str(sweep_dir), self.extra)
        with job.environment(sweep_dir / job.JOB_FILE, root, paths.bundled_conf()):
            spec = pipeline.prepare(overrides, plan.space)
            job.write(sweep_dir, ref, plan, bases, spec.sweep.metric)
            log.info("sweeps: %s.%s over %s", ref["module"], ref["qualname"],
                     ", ".join(f"{k}={v}" for k, v in plan.space.items()))
            return pipeline.run(spec, overrides)
