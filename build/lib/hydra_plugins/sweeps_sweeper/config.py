"""The sweeper's typed config, registered in Hydra's ConfigStore as ``hydra/sweeper: sweeps``."""


from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class SweepsSweeperConf:
    """``hydra.sweeper.*``. A key left at None takes the project's default (conf/config.yaml, conf/trainable/
    hydra_app.yaml); a set key takes the same values as the ``sweeps`` key it maps to.

    Attributes:
        num_samples: ``sweep.num_samples``: trials (with searcher=grid: repeats of the grid).
        metric: ``sweep.metric``: what the trials report (a task that reports nothing returns it).
        mode: ``sweep.mode``: min or max.
        searcher: ``searcher``: random, grid, optuna, hyperopt, nsga2.
        scheduler: ``scheduler``: fifo, asha, hyperband, median, pbt, pb2.
        num_workers: ``trainable.num_workers``: Train workers per trial.
        max_concurrent_trials: ``sweep.max_concurrent_trials`` (0: as many as fit).
        epochs: ``trainable.params.epochs``: the most reports a trial makes (ASHA's and HyperBand's ``max_t``);
            None: the app config's top-level ``epochs`` when it is an int.
        params: sweep definitions kept in the config, like the basic sweeper's (``lr: interval(0.01, 0.1)``);
            the command line wins for the same key.
        overrides: more ``sweeps`` overrides (``scheduler.grace_period=1``, ``report.enabled=false``); the
            search space comes from the Hydra overrides only.
    """

    _target_: str = "hydra_plugins.sweeps_sweeper.sweeper.SweepsSweeper"
    num_samples: int | None = None
    metric: str | None = None
    mode: str | None = None
    searcher: str | None = None
    scheduler: str | None = None
    num_workers: int | None = None
    max_concurrent_trials: int | None = None
    epochs: int | None = None
    params: dict[str, str] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)


ConfigStore.instance().store(group="hydra/sweeper", name="sweeps", node=SweepsSweeperConf, provider="sweeps")
