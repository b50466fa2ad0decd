"""Lever ``scheduler_state``: the whole state of a Tune scheduler that has no ``save``/``restore`` of its own.

Tune saves the search algorithm's state with the experiment, never the scheduler's. ASHA has ``save`` and
``restore`` (public, though nothing calls them); HyperBand, the median stopping rule, PBT and PB2 do not, and
their decisions read private bookkeeping keyed by Tune's ``Trial`` objects (brackets, results, the population's
scores and last perturbations). This lever pickles such a scheduler's attributes with each ``Trial`` replaced by
its id, and puts them back onto the restored scheduler with each id replaced by the restored ``Trial``.
Fallback: only schedulers with their own ``save``/``restore`` keep their state; any other starts empty on
``resume``, and the sweep says so in one line.

The probe does what the sweep will do, for each kind: two real Tune ``Trial`` objects added and reporting, a
dump, a load into a fresh scheduler with new ``Trial`` objects of the same ids, and the two states compared as
object graphs (:func:`round_trip`). A dump that fails later anyway (an attribute a sweep's own trials bring) is
caught where it runs (``sweeps.execution.run.schedstate``): one warning, the scheduler starts empty on resume.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

from sweeps.execution.levers.core import Lever

KINDS = ("HyperBandScheduler", "HyperBandForBOHB", "MedianStoppingRule", "PopulationBasedTraining", "PB2")
TAG = "sweeps-trial"


def _probe() -> str | None:
    from ray.train._internal import session

    if not hasattr(session, "_FutureTrainingResult"):
        return "Train's in-flight checkpoint save moved (ray.train._internal.session._FutureTrainingResult)"
    return next((why for why in map(round_trip, _kinds()) if why), None)


def _kinds() -> list[Callable[[], Any]]:
    """A maker of each kind this lever saves, as small as builds. PB2 only once imported: Ray imports it lazily
    (with scikit-learn, ~1 s), and a sweep that uses it has imported it before the lever is first asked."""
    import sys

    from ray.tune.schedulers import (
        HyperBandForBOHB,
        HyperBandScheduler,
        MedianStoppingRule,
        PopulationBasedTraining,
    )

    # a long perturbation interval and grace period: the results fed are recorded, never acted on
    makers: list[Callable[[], Any]] = [
        lambda: HyperBandScheduler(time_attr="training_iteration", max_t=9),
        lambda: HyperBandForBOHB(time_attr="training_iteration", max_t=9),
        lambda: MedianStoppingRule(time_attr="training_iteration", grace_period=100),
        lambda: PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=100,
                                        hyperparam_mutations={"x": [1, 2]}),
    ]
    pb2 = sys.modules.get("ray.tune.schedulers.pb2")
    if pb2 is not None and getattr(pb2, "has_sklearn", False):
        makers.append(lambda: pb2.PB2(time_attr="training_iteration", perturbation_interval=100,
                                      hyperparam_bounds={"x": [0.0, 1.0]}))
    return makers


class _Controller:
    """Tune's controller as a scheduler sees it while it records results (its trials; pauses and stops done)."""

    def __init__(self, trials: list[Any]) -> None:
        self.trials = trials
        searcher = type("Searcher", (), {"on_pause": _no_op, "on_unpause": _no_op})()
        self.search_alg = type("SearchAlgorithm", (), {"searcher": searcher})()  # BOHB tells it of pauses

    def get_trials(self) -> list[Any]:
        return self.trials

    def get_live_trials(self) -> list[Any]:
        return self.trials

    def stop_trial(self, trial: Any) -> None:
        return None

    def pause_trial(self, trial: Any, should_checkpoint: bool = True) -> None:
        return None


def _no_op(*args: Any) -> None:
    return None


def round_trip(make: Callable[[], Any]) -> str | None:
    """Why a scheduler ``make`` builds does not come back whole through :func:`dump` and :func:`load`, or None.

    Two real Tune ``Trial`` objects are added and report a result, as Tune's loop does; the state is dumped and
    loaded into a fresh scheduler with new ``Trial`` objects of the same ids (a resumed run's). The two states
    must be the same graph (every value equal, every shared object shared alike, the scheduler's references to
    itself its own), with each old trial's place taken by its restored one."""
    from ray.tune.experiment import Trial

    def trials() -> list[Any]:
        return [Trial("probe", config={"x": 1}, trial_id=f"probe{i}", stub=True) for i in range(2)]

    before, old = make(), trials()
    kind = type(before).__name__
    before.set_search_properties("score", "max")
    controller = _Controller(old)
    for trial in old:
        before.on_trial_add(controller, trial)
    for i, trial in enumerate(old):
        before.on_trial_result(controller, trial, {"training_iteration": 1, "score": float(i),
                                                   "time_total_s": 1.0})
    try:
        data = dump(before)
    except Exception as exc:  # an attribute that no longer pickles: the lever's dump would fail in the sweep
        return f"{kind}'s state does not pickle ({type(exc).__name__}: {exc})"
    new = trials()
    after = make()
    load(after, data, {t.trial_id: t for t in new})
    same = _Same(Trial, {id(o): n for o, n in zip(old, new, strict=True)})
    why = same.differ(before, after, kind)
    if why is None and not same.trials:
        why = f"{kind}: the trials it was given are nowhere in its state"
    return f"{kind}'s state does not come back whole through a dump and a load ({why})" if why else None


class _Same:
    """Compares two object graphs: values equal, sharing alike, each ``Trial`` of the first the one mapped to it."""

    def __init__(self, trial_cls: type, trials: dict[int, Any]) -> None:
        self.trial_cls, self.mapped, self.trials = trial_cls, trials, 0
        self.pairs: dict[int, Any] = {}

    def differ(self, a: Any, b: Any, path: str) -> str | None:
        """Where ``a`` and ``b`` first differ (a path into the state), or None."""
        if isinstance(a, self.trial_cls):
            self.trials += 1
            return None if b is self.mapped.get(id(a)) else f"{path} is not the restored trial"
        if type(a) is not type(b):
            return f"{path} is a {type(b).__name__}, was a {type(a).__name__}"
        if isinstance(a, (str, bytes, int, float, bool, type(None))):
            return None if a == b or (a != a and b != b) else f"{path} is {b!r}, was {a!r}"
        if id(a) in self.pairs:  # met before: the same object must meet it again
            return None if self.pairs[id(a)] is b else f"{path} is no longer shared as it was"
        self.pairs[id(a)] = b
        return self._inside(a, b, path)

    def _inside(self, a: Any, b: Any, path: str) -> str | None:
        if isinstance(a, dict):
            if len(a) != len(b):
                return f"{path} has {len(b)} entries, had {len(a)}"
            pairs = zip(a.items(), b.items(), strict=True)
            return next((w for (ka, va), (kb, vb) in pairs
                         if (w := self.differ(ka, kb, f"{path} key") or self.differ(va, vb, f"{path}[{ka!r}]"))), None)
        if isinstance(a, (list, tuple)):
            if len(a) != len(b):
                return f"{path} has {len(b)} items, had {len(a)}"
            return next((w for i, (x, y) in enumerate(zip(a, b, strict=True))
                         if (w := self.differ(x, y, f"{path}[{i}]"))), None)
        if isinstance(a, (set, frozenset)):  # of values: of trials, the ids
            ids = [{getattr(x, "trial_id", x) for x in s} for s in (a, b)]
            return None if ids[0] == ids[1] else f"{path} is {ids[1]}, was {ids[0]}"
        if callable(getattr(a, "equals", None)):  # pandas (PB2's data)
            return None if a.equals(b) else f"{path} differs"
        if hasattr(a, "__code__"):  # a lambda over the scheduler (HyperBand's _get_r0): its closure's contents
            if a.__code__ != b.__code__ or len(a.__closure__ or ()) != len(b.__closure__ or ()):
                return f"{path} is another function"
            return next((w for x, y in zip(a.__closure__ or (), b.__closure__ or (), strict=True)
                         if (w := self.differ(x.cell_contents, y.cell_contents, f"{path}'s closure"))), None)
        if hasattr(a, "__dict__"):
            return self.differ(vars(a), vars(b), path)
        try:
            return None if bool(a == b) else f"{path} is {b!r}, was {a!r}"
        except Exception:  # a value that cannot be compared cannot be trusted to come back
            return f"{path}: a {type(a).__name__} that cannot be compared"


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
    another session, and PBT takes a donor without a saved checkpoint as one to skip until its next save. A
    reference to the scheduler itself (HyperBand's ``_get_r0`` is a lambda over it) is the scheduler it is
    loaded into, not a copy of the one dumped."""
    import ray
    from ray import cloudpickle
    from ray.train._internal.session import _FutureTrainingResult
    from ray.tune.experiment import Trial

    session_bound = (ray.ObjectRef, _FutureTrainingResult)

    class Pickler(cloudpickle.CloudPickler):  # type: ignore[misc]
        def persistent_id(self, obj: Any) -> Any:
            if isinstance(obj, Trial):
                return (TAG, obj.trial_id)
            if obj is scheduler:
                return (TAG + "-self", None)
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
            if tag == TAG + "-self":
                return scheduler
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
