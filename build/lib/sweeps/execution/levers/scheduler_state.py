"""Lever ``scheduler_state``: the whole state of a Tune scheduler that has no ``save``/``restore`` of its own.

Tune saves the search algorithm's state with the experiment, never the scheduler's. ASHA has ``save`` and
``restore`` (public, though nothing calls them); HyperBand, the median stopping rule, PBT and PB2 do not, and
their decisions read private bookkeeping keyed by Tune's ``Trial`` objects (brackets, results, the population's
scores and last perturbations). This lever pickles such a scheduler's attributes with each ``Trial`` replaced by
its id, and puts them back onto the restored scheduler with each id replaced by the restored ``Trial``.
Fallback: only schedulers with their own ``save``/``restore`` keep their state; any other starts empty on
``resume``, and the sweep says so in one line.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from sweeps.execution.levers.core import Lever

KINDS = ("HyperBandScheduler", "HyperBandForBOHB", "MedianStoppingRule", "PopulationBasedTraining", "PB2")
TAG = "sweeps-trial"


def _probe() -> str | None:
    from ray.train._internal import session

    if not hasattr(session, "_FutureTrainingResult"):
        return "Train's in-flight checkpoint save moved (ray.train._internal.session._FutureTrainingResult)"
    from ray.tune.schedulers import HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining

    for cls in (HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining):
        made = cls() if cls is not PopulationBasedTraining else cls(hyperparam_mutations={"x": [1, 2]})
        if not isinstance(vars(made), dict) or not vars(made):
            return f"{cls.__name__} keeps no instance attributes"
    return None


LEVER = Lever(name="scheduler_state", package="ray", checked=("2.60.",),
              what="HyperBand's, the median rule's, PBT's and PB2's state saved with the experiment, restored on "
                   "resume",
              fallback="only schedulers with their own save/restore (ASHA) keep their state across a resume",
              probe=_probe)


def handles(scheduler: Any) -> bool:
    """Whether this lever saves ``scheduler`` (one of the kinds it was read for)."""
    return any(c.__name__ in KINDS for c in type(scheduler).__mro__)


def dump(scheduler: Any) -> bytes:
    """The scheduler's attributes, each ``Trial`` in them pickled as its id, and each object of this Ray session
    (an object ref, a checkpoint save still in flight, which PBT keeps as a donor's) as None: a resumed run has
    another session, and PBT takes a donor without a saved checkpoint as one to skip until its next save."""
    import ray
    from ray import cloudpickle
    from ray.train._internal.session import _FutureTrainingResult
    from ray.tune.experiment import Trial

    session_bound = (ray.ObjectRef, _FutureTrainingResult)

    class Pickler(cloudpickle.CloudPickler):  # type: ignore[misc]
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, Trial):
                return (TAG, obj.trial_id)
            return (TAG + "-none", None) if isinstance(obj, session_bound) else None

    buf = io.BytesIO()
    Pickler(buf).dump(dict(vars(scheduler)))
    return buf.getvalue()


def load(scheduler: Any, data: bytes, trials: Mapping[str, Any]) -> None:
    """Put the attributes :func:`dump` saved back onto ``scheduler``, with each id the restored ``Trial``
    (``trials``: id -> Trial). KeyError for a trial that is not there."""
    import pickle

    class Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            tag, trial_id = pid
            if tag == TAG + "-none":
                return None
            if tag != TAG:
                raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
            return trials[trial_id]

    state = Unpickler(io.BytesIO(data)).load()
    vars(scheduler).update(state)


def population(scheduler: Any) -> dict[str, tuple[Any, Any]] | None:
    """PBT's (or PB2's) population as it decides from it: trial id -> (last score, last perturbation time);
    None for other schedulers."""
    states = getattr(scheduler, "_trial_state", None)
    if not isinstance(states, dict):
        return None
    return {t.trial_id: (getattr(s, "last_score", None), getattr(s, "last_perturbation_time", None))
            for t, s in states.items()}
