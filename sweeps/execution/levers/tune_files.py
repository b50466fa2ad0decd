"""Lever ``tune_files``: the names of the files Tune keeps an experiment's state in, for the sweep's copies of them.

Tune saves an experiment as ``tuner.pkl`` and, per driver session, ``experiment_state-<session>.json``,
``searcher-state-<session>.pkl`` and ``callback-states-<session>.pkl`` (its classes' ``CKPT_FILE_TMPL`` and
``tuner_internal._TUNER_PKL``: names Tune does not promise to keep). The sweep keeps a last good copy of that set
(a killed driver or a full disk can leave a half-written state) and puts it back on ``resume``
(:mod:`sweeps.execution.run.recovery`); reports and the searcher's restore find the files by these names. The
probe holds every name below equal to Tune's own constants, and the callbacks' file to its layout (one state per
callback, by its place: :func:`callback_states`). Fallback: no good copies are kept and none is put
back (``resume`` restores Tune's state as Tune left it, and says so when it cannot).
"""

from __future__ import annotations

from sweeps.execution.levers.core import Lever

TUNER = "tuner.pkl"
STATE_PREFIX = "experiment_state-"
SEARCHER_PREFIX = "searcher-state-"
CALLBACK_PREFIX = "callback-states-"
PARTS = ((STATE_PREFIX, ".json"), (SEARCHER_PREFIX, ".pkl"), (CALLBACK_PREFIX, ".pkl"))


def _probe() -> str | None:
    from ray.tune.callback import CallbackList
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.impl import tuner_internal
    from ray.tune.search.searcher import Searcher

    theirs = {TUNER: getattr(tuner_internal, "_TUNER_PKL", None),
              STATE_PREFIX + "{}.json": getattr(TuneController, "CKPT_FILE_TMPL", None),
              SEARCHER_PREFIX + "{}.pkl": getattr(Searcher, "CKPT_FILE_TMPL", None),
              CALLBACK_PREFIX + "{}.pkl": getattr(CallbackList, "CKPT_FILE_TMPL", None)}
    moved = [f"{mine!r} is {found!r} in Tune" for mine, found in theirs.items() if mine != found]
    if moved:
        return "; ".join(moved)
    from ray.tune import Callback

    class Kept(Callback):  # type: ignore[misc]
        def get_state(self) -> dict[str, int]:
            return {"kept": 1}

    layout = CallbackList([Callback(), Kept()]).get_state()
    if callback_states_of(layout) != [{"kept": 1}]:
        return f"CallbackList.get_state() returned {layout!r}, not one state per callback by its place"
    return None


LEVER = Lever(name="tune_files", package="ray", checked=("2.53.", "2.60."),
              what="the sweep keeps a last good copy of Tune's experiment state files and puts it back on resume",
              fallback="no good copies: resume restores Tune's state as Tune left it (a damaged one is said)",
              probe=_probe)


def callback_states_of(saved: object) -> list[dict]:  # type: ignore[type-arg]
    """The callbacks' states in what a ``callback-states-*.pkl`` holds once unpickled (a dict of each callback's
    place to its state); [] for anything else."""
    return [v for v in saved.values() if isinstance(v, dict)] if isinstance(saved, dict) else []
