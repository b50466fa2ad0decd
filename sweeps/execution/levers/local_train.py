"""Lever ``local_train``: a single-process trial trains in its Tune trial's own process, its reports going to Tune.

Ray Train's public local mode (``ScalingConfig(num_workers=0)``) runs the training function in the calling
process, with ``ray.train.report``, ``get_checkpoint``, ``get_context`` and ``get_dataset_shard`` answered by a
``LocalTrainFnUtils`` object that keeps the last report in memory (and logs it), so nothing reaches Tune and
``get_checkpoint()`` never returns the checkpoint Tune handed the trial. This lever swaps that object, for the
length of the loop, for one of a subclass whose ``report`` hands each report to the trial's Tune session
(``ray.tune.report``, which copies the checkpoint into the trial's folder before it returns, while the loop's
folder still exists) and whose ``get_checkpoint`` starts from the trial's own checkpoint (a retry's, a PBT
donor's, a resumed trial's). Train's public functions refuse to run inside a Tune trial (they raise a
``DeprecationWarning`` when Tune's session has no world rank): for the length of the loop, the trial's Tune session
says rank 0, as a Train worker's session would. Everything else is Ray's local mode as it is. It rests on Train's
private ``set_train_fn_utils`` / ``get_train_fn_utils`` and ``LocalTrainFnUtils``, and on Tune's session object
and the check Train makes of it (read in Ray 2.53 and 2.60).

Fallback (public): the trial keeps a Train worker group of one worker (its controller and worker processes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sweeps.execution.levers.core import Lever, first, has, source_says

MODULE = "ray.train.v2._internal.execution.train_fn_utils"
TRAINER = "ray.train.v2.api.data_parallel_trainer"
SESSION = "ray.train._internal.session"  # Tune's function-trainable session (its world_rank)
TUNE_CHECK = "ray.tune.trainable.trainable_fn_utils"  # _in_tune_session(): what Train's functions refuse


def _probe() -> str | None:
    import importlib

    utils = importlib.import_module(MODULE)
    if problem := has(utils, "LocalTrainFnUtils", "get_train_fn_utils", "set_train_fn_utils"):
        return problem
    local = utils.LocalTrainFnUtils
    for name in ("report", "get_checkpoint", "get_context"):
        if not callable(getattr(local, name, None)):
            return f"LocalTrainFnUtils has no {name}()"
    params = inspect.signature(local.report).parameters
    if list(params)[1:3] != ["metrics", "checkpoint"]:
        return f"LocalTrainFnUtils.report takes {list(params)[1:]}, not (metrics, checkpoint, ...)"
    if "_last_checkpoint" not in inspect.getsource(local.__init__):
        return "LocalTrainFnUtils no longer keeps _last_checkpoint"
    return first(source_says(TRAINER, "self.running_in_local_mode = self.scaling_config.num_workers == 0"),
                 source_says("ray.train.v2.api.train_fn_utils", "get_train_fn_utils().report("),
                 source_says(SESSION, "def get_session()", "self.world_rank = world_rank"),
                 source_says(TUNE_CHECK, "get_session().world_rank is None"))


LEVER = Lever(name="local_train", package="ray", checked=("2.53.", "2.60."),
              what="a single-process trial trains in its Tune trial's process (Train's local mode), its reports "
                   "and checkpoints going to Tune, the trial's checkpoint returned by get_checkpoint(); the "
                   "process is reused for the sweep's next trial",
              fallback="the trial keeps a Train worker group of one worker (a controller and a worker process "
                       "per trial start)",
              probe=_probe)


Forward = Callable[[dict[str, Any], Any], None]


@contextmanager
def reporting_to_tune(forward: Forward, start: Any) -> Iterator[None]:
    """Inside Train's local mode (called from the training function): every ``ray.train.report(metrics,
    checkpoint)`` of the loop calls ``forward(metrics, checkpoint)``, and ``ray.train.get_checkpoint()`` returns
    ``start`` until the loop reports one. On the way out the trial's object is gone again."""
    import importlib

    utils = importlib.import_module(MODULE)
    tune_session = importlib.import_module(SESSION).get_session()
    if tune_session is None:
        raise RuntimeError("a trial in its own process runs inside a Tune trial, but there is no Tune session")
    ray_own = utils.get_train_fn_utils()
    if not isinstance(ray_own, utils.LocalTrainFnUtils):
        raise RuntimeError(f"Train's local mode did not set up its local utilities (found {type(ray_own)})")

    class ToTune(type(ray_own)):  # type: ignore[misc]
        def report(self, metrics: dict[str, Any], checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
            self._last_metrics = metrics
            forward(metrics, checkpoint)
            if checkpoint is not None:
                self._last_checkpoint = checkpoint

    ours = object.__new__(ToTune)
    ours.__dict__.update(ray_own.__dict__)
    ours._last_checkpoint = start
    rank_before = tune_session.world_rank
    tune_session.world_rank = 0  # Train's functions answer (they refuse a Tune session of no rank)
    utils.set_train_fn_utils(ours)
    try:
        yield
    finally:
        tune_session.world_rank = rank_before
        ray_own._last_metrics = ours._last_metrics
        utils.set_train_fn_utils(ray_own)


def forget() -> None:
    """After the trial's ``fit()``: no Train utilities are left in the process for the next trial it runs (a
    reused process must not answer ``get_checkpoint()`` with the last trial's checkpoint)."""
    import importlib

    importlib.import_module(MODULE).set_train_fn_utils(None)
