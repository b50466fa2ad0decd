"""The rungs of successive halving and the decisions promotion ASHA and PASHA make on them: pure Python, no Ray.

Promotion ASHA (Li et al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020): a trial pauses
at each rung (``grace_period * reduction_factor**k``); when a slot frees, the best not-yet-promoted paused trial
of the highest rung where it is in the top ``1/reduction_factor`` is promoted (resumed from its checkpoint), else
a new trial starts at the bottom rung. PASHA (Bohdal et al., "PASHA: Efficient HPO and NAS with Progressive
Resource Allocation", ICLR 2023) is the same with a current top rung that starts at the second rung and is raised
by one rung only while the rankings of the top two rungs disagree: two trials of the top rung ordered one way at
the rung below and the other way at the top, each by more than ``epsilon`` (the paper's soft ranking).

:class:`Ladder` holds the rung tables by trial id and is JSON-able (:meth:`Ladder.state`), so a sweep's resume
puts them back whole; :mod:`sweeps.execution.tuning.promotion` puts it behind Tune's ``TrialScheduler``, and
``benchmarks/promotion.py`` replays recorded learning curves over it.
"""

from __future__ import annotations

import math
from typing import Any

from sweeps.config.sections.scheduler import milestones

__all__ = ["CONTINUE", "PAUSE", "STOP", "Ladder", "milestones"]
CONTINUE, PAUSE, STOP = "CONTINUE", "PAUSE", "STOP"


class Ladder:
    """Rung tables and the promotion rule; ``epsilon`` not None makes it PASHA's (a top rung that rises).

    Scores are "higher is better" (the scheduler negates a metric to minimise). A trial's results go in through
    :meth:`result`, which says CONTINUE, PAUSE (it reached a rung below the top) or STOP (it reached ``max_t``).
    """

    def __init__(self, levels: list[float], reduction_factor: float, epsilon: float | None = None) -> None:
        self.levels = [float(x) for x in levels]
        self.rf = float(reduction_factor)
        self.epsilon = epsilon
        self.rungs: list[dict[str, float]] = [{} for _ in self.levels]
        self.promoted: list[list[str]] = [[] for _ in self.levels]
        self.level_of: dict[str, int] = {}
        self.waiting: list[str] = []  # paused at their rung, not promoted (yet)
        self.top = len(self.levels) - 1 if epsilon is None else min(1, len(self.levels) - 1)
        self.ahead: dict[str, tuple[int, float]] = {}  # a requeued waiting trial's result at a rung above its own
        self.raises: list[dict[str, Any]] = []  # PASHA: each raise of the top rung, and how many trials the top held

    @property
    def max_t(self) -> float:
        """The current maximum resource: ``max_t`` for ASHA, PASHA's current top rung."""
        return self.levels[self.top]

    def result(self, trial_id: str, t: float, score: float) -> str:
        """Record a trial's result at ``t`` (its time attribute) and say what it does next."""
        if not math.isfinite(score):
            score = -math.inf
        reached = [k for k, level in enumerate(self.levels) if t >= level - 1e-9]
        if not reached:
            return CONTINUE
        k = reached[-1]
        if trial_id in self.waiting:
            # Tune requeues every unfinished trial on resume, paused ones too: one that waited for promotion waits
            # again at its first result; a rung that result reached counts once the trial is promoted (:meth:`promote`)
            if k > self.level_of.get(trial_id, -1):
                self.ahead[trial_id] = (k, score)
            return PAUSE
        if k <= self.level_of.get(trial_id, -1):
            return CONTINUE
        return self._record(trial_id, k, score)

    def _record(self, trial_id: str, k: int, score: float) -> str:
        self.level_of[trial_id] = k
        self.rungs[k][trial_id] = score
        if k == len(self.levels) - 1:
            return STOP
        if k == self.top:
            self._maybe_raise()
        self.waiting.append(trial_id)
        return PAUSE

    def _maybe_raise(self) -> None:
        if self.epsilon is None or self.top >= len(self.levels) - 1 or not self.disagree(self.top):
            return
        self.raises.append({"to": self.levels[self.top + 1], "trials_compared": len(self.rungs[self.top])})
        self.top += 1

    def disagree(self, k: int) -> bool:
        """Whether two trials of rung ``k`` are ordered one way at rung ``k - 1`` and the other way at ``k``, each
        by more than epsilon (PASHA's soft ranking)."""
        eps = self.epsilon or 0.0
        top, below = self.rungs[k], self.rungs[k - 1]
        ids = sorted(top)
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                lower, upper = below[a] - below[b], top[a] - top[b]
                if (lower > eps and upper < -eps) or (lower < -eps and upper > eps):
                    return True
        return False

    def promotable(self) -> list[str]:
        """The trials a free slot may promote, the one to promote first first: per rung from the highest below
        the top, the waiting trials among the rung's best ``floor(n / reduction_factor)``, best first."""
        waiting, out = set(self.waiting), []
        for k in range(self.top - 1, -1, -1):
            table = self.rungs[k]
            quota = int(math.floor(len(table) / self.rf + 1e-9))
            best = sorted(table, key=lambda tid: (-table[tid], tid))[:quota]
            out += [tid for tid in best if tid in waiting and tid not in self.promoted[k]]
        return out

    def last_promotion(self) -> str | None:
        """With no trial left to start and none promotable: the best waiting trial of the highest rung that has
        one, while no trial has reached the top rung (successive halving keeps at least one; with few trials the
        top third of a rung may be empty), else None: the waiting trials lost at their rungs."""
        if self.rungs[self.top]:
            return None
        for k in range(self.top - 1, -1, -1):
            waiting = [tid for tid in self.waiting if self.level_of.get(tid) == k]
            if waiting:
                return min(waiting, key=lambda tid: (-self.rungs[k][tid], tid))
        return None

    def promote(self, trial_id: str) -> int:
        """Mark ``trial_id`` promoted from its rung; returns the rung's index. A trial that already reached a
        higher rung (a resume's requeue ran it on, :meth:`result`) counts there now: it may wait there again
        (:meth:`waits`), with nothing to train."""
        k = self.level_of[trial_id]
        self.promoted[k].append(trial_id)
        self.forget(trial_id)
        ahead = self.ahead.pop(trial_id, None)
        if ahead is not None and ahead[0] > k:
            self._record(trial_id, *ahead)
        return k

    def waits(self, trial_id: str) -> bool:
        return trial_id in self.waiting

    def forget(self, trial_id: str) -> None:
        """A trial that will not wait for promotion any more (ended, errored, removed); its results stay."""
        if trial_id in self.waiting:
            self.waiting.remove(trial_id)

    def state(self) -> dict[str, Any]:
        """Everything, JSON-able, by trial id."""
        return {"levels": self.levels, "reduction_factor": self.rf, "epsilon": self.epsilon, "top": self.top,
                "rungs": [dict(r) for r in self.rungs], "promoted": [list(p) for p in self.promoted],
                "level_of": dict(self.level_of), "waiting": list(self.waiting), "raises": list(self.raises),
                "ahead": {tid: list(v) for tid, v in self.ahead.items()}}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Ladder:
        ladder = cls(state["levels"], state["reduction_factor"], state["epsilon"])
        ladder.top = int(state["top"])
        ladder.rungs = [{str(k): float(v) for k, v in r.items()} for r in state["rungs"]]
        ladder.promoted = [list(p) for p in state["promoted"]]
        ladder.level_of = {str(k): int(v) for k, v in state["level_of"].items()}
        ladder.waiting = list(state["waiting"])
        ladder.raises = list(state["raises"])
        ladder.ahead = {str(tid): (int(k), float(v)) for tid, (k, v) in state.get("ahead", {}).items()}
        return ladder

    def summary(self) -> dict[str, Any]:
        """Facts for a log line or a report: trials per rung, promotions per rung, PASHA's top and raises."""
        return {"rungs": {f"{level:g}": len(r) for level, r in zip(self.levels, self.rungs, strict=True)},
                "promoted": {f"{level:g}": len(p) for level, p in zip(self.levels, self.promoted, strict=True)},
                "max_t": self.max_t, "raises": list(self.raises)}
