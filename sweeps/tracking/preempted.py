"""A trial's node preemptions as tags of its MLflow run (``preemptions``, ``epochs_lost``), from the results the
tracker sees (:mod:`sweeps.preemptions`). The counts themselves are metrics of the run too
(``sweeps/preemptions``, ``sweeps/resumed_epoch``, ``sweeps/epoch``), as the trial's loop reported them."""

from __future__ import annotations

from collections.abc import Mapping

from sweeps.preemptions import Tally


class Spots:
    """One tally per trial, fed every result in order."""

    def __init__(self) -> None:
        self.tallies: dict[str, tuple[Tally, bool]] = {}  # trial id -> (tally, fed from its first result)

    def tags(self, trial_id: str, result: Mapping[str, object]) -> dict[str, str]:
        """Feed ``result``; the tags the trial's run gets when it ends (none while its loop said nothing of
        preemptions). ``epochs_lost`` only where this driver saw every result of the trial: a resumed driver did
        not see the epochs redone before it started."""
        step = result.get("training_iteration")
        first = isinstance(step, int | float) and step <= 1
        tally, whole = self.tallies.setdefault(trial_id, (Tally(), first))
        tally.feed(result)
        if not tally.known:
            return {}
        tags = {"preemptions": str(tally.preemptions)}
        if whole:
            tags["epochs_lost"] = str(tally.epochs_lost)
        return tags
