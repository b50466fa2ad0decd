"""``hydra/sweeper=sweeps``: Hydra multirun jobs as the trials of a ``sweeps`` sweep (docs/hydra_sweeper.md).

``python train.py -m hydra/sweeper=sweeps 'lr=tag(log, interval(1e-4, 1e-1))' hydra.sweeper.scheduler=asha``
runs the app's task function on Ray Train workers, searched by Ray Tune, tracked in MLflow. Hydra finds the
plugin by scanning the ``hydra_plugins`` namespace package; :mod:`.config` registers its config.
"""
