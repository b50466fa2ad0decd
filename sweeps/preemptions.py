"""A trial's node preemptions and the epochs they cost, from the rows it reported (pure, no I/O).

What the loop says (:mod:`trainables.preemption`, in the bundled loops and the script adapter, on a Ray with
``ray.train.get_preemption_info``): ``sweeps/preemptions``, its count of starts from a checkpoint saved under a
preemption notice; ``sweeps/resumed_epoch``, on the first report of such a start, the epoch that checkpoint holds
(each such report is one preemption; the loop's count covers those before a driver's resume); ``sweeps/epoch``,
the epoch of every report made under a notice. Epochs lost to one preemption: the furthest epoch reported since
the previous start, less the epoch resumed from (epochs whose reports Tune saw and whose work was then redone).
The epoch in flight when the node went is lost too, partly trained; no report shows it, and it is not counted.
A loop that does not say these (a loop of your own, a Ray without preemption notices) has no figures:
:attr:`Tally.known` is False, never a 0 that was not observed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PREEMPTIONS = "sweeps/preemptions"  # same names as trainables.preemption
RESUMED_EPOCH = "sweeps/resumed_epoch"
EPOCH = "sweeps/epoch"


@dataclass
class Tally:
    """Fed a trial's rows in the order it reported them."""

    restarts: int = 0  # first reports of a start after a preemption, seen here
    carried: int = 0  # the loop's own count (it outlives a driver's resume; a PBT exploit starts it afresh)
    epochs_lost: int = 0
    known: bool = False  # a row said something about preemptions
    _furthest: int | None = None  # the furthest epoch reported under a notice since the last start

    @property
    def preemptions(self) -> int:
        return max(self.restarts, self.carried)

    def feed(self, row: Mapping[str, object]) -> None:
        count, resumed, epoch = (_int(row.get(k)) for k in (PREEMPTIONS, RESUMED_EPOCH, EPOCH))
        if count is None and resumed is None and epoch is None:
            return
        self.known = True
        if resumed is not None:
            self.restarts += 1
            if self._furthest is not None:
                self.epochs_lost += max(0, self._furthest - resumed)
            self._furthest = None
        if count is not None:
            self.carried = max(self.carried, count)
        if epoch is not None:
            self._furthest = epoch if self._furthest is None else max(self._furthest, epoch)


def tally(rows: Iterable[Mapping[str, object]]) -> Tally:
    """The :class:`Tally` of a trial's rows (oldest first)."""
    t = Tally()
    for row in rows:
        t.feed(row)
    return t


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return int(value)
