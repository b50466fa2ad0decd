"""Promotion ASHA and PASHA on Tune's public ``TrialScheduler`` interface (``scheduler=asha_promote|pasha``).

Ray's ``ASHAScheduler`` is the stopping variant: a trial runs until it falls below its rung's cut, so on one or
two slots the first trials run to ``max_t`` before any comparison exists. These schedulers pause a trial at each
rung (``TrialScheduler.PAUSE``: Tune checkpoints it and frees its slot, as for HyperBand and PBT) and, in
``choose_trial_to_run``, resume the best promotable paused trial first; the decisions are :mod:`.ladder`'s.

How they meet the sweep's slots (``sweeps.execution.run.assembly``): Tune starts every PENDING trial on its own,
so the sweep makes a new trial only while no paused trial is promotable (:meth:`PromotionASHA.promotable_count`),
and a promotion is chosen only while fewer trials run or wait than the sweep's concurrency. A paused trial's
slot comes back through Tune's own pause path (a checkpoint, then its actor removed with the placement group that
holds the slot); its Train workers are owned by that actor and end with it, and the sweep's reaper frees their
placement group (docs/ray.md), so a promoted trial's workers are placed only on what the paused one released.
(Not yet checked on a GPU: whether CUDA memory is back by the time the devices are placed again.)

When the search has no trial left to make and nothing runs, and no trial has reached the top rung yet (with few
trials a rung's top third may be empty), the best paused trial of the highest rung is promoted, as synchronous
successive halving keeps at least one; after that the paused trials that no rung promotes are stopped: they
lost at their rung, as Ray's stopping ASHA would have stopped them there.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sweeps.execution.tuning.ladder import PAUSE, STOP, Ladder, milestones

log = logging.getLogger(__name__)
_DECISION = {PAUSE: TrialScheduler.PAUSE, STOP: TrialScheduler.STOP}


class PromotionASHA(FIFOScheduler):  # type: ignore[misc]
    """Asynchronous successive halving that promotes paused trials (Li et al., MLSys 2020).

    Args:
        time_attr: the monotonic counter rungs are measured in (``training_iteration``: epochs).
        metric: the metric to rank by; ``mode``: ``min`` or ``max`` (Tune's ``TuneConfig`` sets both).
        max_t: the full budget, where a trial ends.
        grace_period: the first rung.
        reduction_factor: the rungs' ratio; the top ``1/reduction_factor`` of a rung is promotable.

    Example: ``PromotionASHA(max_t=27, grace_period=1, reduction_factor=3)`` pauses at 1, 3 and 9 epochs.
    """

    _epsilon: float | None = None

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None, mode: str | None = None,
                 max_t: float = 100, grace_period: float = 1, reduction_factor: float = 4) -> None:
        super().__init__()
        self._time_attr, self._rank_metric, self._mode = time_attr, metric, mode
        self.ladder = Ladder(milestones(max_t, grace_period, reduction_factor), reduction_factor, self._epsilon)
        self.events: list[tuple[str, str, float]] = []  # (trial id, "pause" | "promotion", where), until drained

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("events", [])  # a scheduler pickled before it had them

    @property
    def metric(self) -> str | None:
        return self._rank_metric

    @property
    def supports_buffered_results(self) -> bool:
        return False  # a result past a rung would run the trial beyond its pause

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if self._rank_metric and metric:
            return False
        self._rank_metric = self._rank_metric or metric
        self._mode = self._mode or mode
        return True

    def _score(self, result: dict[str, Any]) -> float | None:
        value = result.get(self._rank_metric or "")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return -float(value) if self._mode == "min" else float(value)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        score, t = self._score(result), result.get(self._time_attr)
        if score is None or not isinstance(t, int | float):
            return str(TrialScheduler.CONTINUE)
        top = self.ladder.top
        decision = self.ladder.result(trial.trial_id, float(t), score)
        if self.ladder.top != top:
            log.info("%s raises its current maximum to %s=%g: the top two rungs rank their trials differently",
                     type(self).__name__, self._time_attr, self.ladder.max_t)
        if decision == PAUSE:
            log.debug("trial %s pauses at %s=%g", trial.trial_id, self._time_attr, t)
            self.events.append((trial.trial_id, "pause", float(t)))
        return str(_DECISION.get(decision, TrialScheduler.CONTINUE))

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        # Tune asks the sweep's stopper first: a trial it ends at its last epoch never reaches on_trial_result
        self.ladder.forget(trial.trial_id)  # it ends: its last result counts where it got, promoted or not
        score, t = self._score(result or {}), (result or {}).get(self._time_attr)
        if score is not None and isinstance(t, int | float):
            self.ladder.result(trial.trial_id, float(t), score)
        self.ladder.forget(trial.trial_id)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.ladder.forget(trial.trial_id)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self.ladder.forget(trial.trial_id)

    def promotable_count(self) -> int:
        """How many paused trials a free slot would promote before it starts a new trial."""
        return len(self.ladder.promotable())

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        trials = tune_controller.get_trials()
        unfinished = {t.trial_id for t in trials if t.status in ("PENDING", "RUNNING", "PAUSED")}
        for gone in [tid for tid in self.ladder.waiting if tid not in unfinished]:
            self.ladder.forget(gone)  # an extension's earlier experiment: its trials stay there, their results count
        pending = next((t for t in trials if t.status == "PENDING"), None)
        if pending is not None:
            return pending
        paused = {t.trial_id: t for t in trials if t.status == "PAUSED"}
        chosen = self._promote(paused)
        if chosen is not None:
            return chosen
        if paused and not any(t.status == "RUNNING" for t in trials) and tune_controller.search_alg.is_finished():
            last = self.ladder.last_promotion()
            if last is not None and last in paused:
                k = self.ladder.promote(last)
                self.events.append((last, "promotion", self._next_level(k)))
                log.info("no trial reached %s=%g yet: promoting the best paused trial of the highest rung, %s",
                         self._time_attr, self.ladder.max_t, last)
                return paused[last]
            self._stop_unpromoted(tune_controller, list(paused.values()))
        return None

    def _promote(self, paused: dict[str, Any]) -> Any:
        """The best promotable paused trial, marked promoted; one that counts at a higher rung once promoted (a
        resume ran it on) waits there instead, and the next is looked for."""
        while True:
            trial_id = next((tid for tid in self.ladder.promotable() if tid in paused), None)
            if trial_id is None:
                return None
            k = self.ladder.promote(trial_id)
            log.info("promoting trial %s from rung %s=%g", trial_id, self._time_attr, self.ladder.levels[k])
            self.events.append((trial_id, "promotion", self._next_level(k)))
            if not self.ladder.waits(trial_id):
                return paused[trial_id]

    def _next_level(self, k: int) -> float:
        """Where a trial promoted from rung ``k`` goes next: the next rung, or the full budget."""
        levels = self.ladder.levels
        return float(levels[k + 1]) if k + 1 < len(levels) else float(self.ladder.max_t)

    def pop_events(self) -> list[tuple[str, str, float]]:
        """The pauses and promotions since the last call (the sweep's tracker records them on the trials' runs)."""
        out, self.events = self.events, []
        return out

    def _stop_unpromoted(self, tune_controller: Any, paused: list[Any]) -> None:
        log.info("no trial left to start and none promotable: stopping %d paused trial(s) at their rung; %s",
                 len(paused), self.describe())
        for trial in paused:
            self.ladder.forget(trial.trial_id)
            tune_controller.stop_trial(trial)

    def describe(self) -> str:
        """One line: trials per rung and promotions (and PASHA's top rung)."""
        facts = self.ladder.summary()
        return f"rungs {facts['rungs']}, promoted {facts['promoted']}"

    def debug_string(self) -> str:
        return f"{type(self).__name__}: {self.describe()}"

    def save(self, checkpoint_path: str) -> None:
        """The rung tables, promotions and (PASHA) current top rung, as JSON by trial id."""
        with open(checkpoint_path, "w") as f:
            json.dump(self.ladder.state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            state = json.load(f)
        if [float(x) for x in state["levels"]] != self.ladder.levels:
            raise ValueError(f"the saved rungs {state['levels']} are not this scheduler's {self.ladder.levels}")
        self.ladder = Ladder.from_state(state)


class PASHA(PromotionASHA):  # type: ignore[misc]
    """Progressive ASHA (Bohdal et al., ICLR 2023): promotion ASHA whose top rung starts at the second rung and
    rises one rung at a time only while the top two rungs rank their trials differently (soft ranking: orders
    that differ by at most ``epsilon`` agree). :attr:`current_max_t` is where it stopped raising."""

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None, mode: str | None = None,
                 max_t: float = 100, grace_period: float = 1, reduction_factor: float = 4,
                 epsilon: float = 0.0) -> None:
        self._epsilon = float(epsilon)
        super().__init__(time_attr, metric, mode, max_t, grace_period, reduction_factor)

    @property
    def current_max_t(self) -> float:
        return self.ladder.max_t

    def describe(self) -> str:
        raises = ", ".join(f"{r['to']:g}" for r in self.ladder.raises) or "none"
        return f"{super().describe()}; current max {self._time_attr}={self.current_max_t:g} (raised to: {raises})"
