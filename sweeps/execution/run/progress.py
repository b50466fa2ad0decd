"""What a user sees while a sweep runs: one compact status line every few seconds, the full log in a file.

Tune's own per-result tables (hundreds of lines for a small sweep) are off (``verbose=0``). Instead:
``trials: 2 running, 3 done (1 stopped early), 0 failed, 1 pending | best val/acc 0.9722 (trial ..., lr=...) |
45 s elapsed, at most ~1.2 min left``; every result and status change also goes, one JSON line each, to
``$SWEEPS_HOME/logs/<sweep id>.log``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

log = logging.getLogger("sweeps.progress")
EVERY_S = 10.0
QUIET_S = 60.0


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class Progress:
    """The state behind the status line (plain data: Tune pickles its callbacks)."""

    def __init__(self, metric: str, mode: str, total_trials: int | None, epochs: int | None, log_path: str,
                 time_budget_s: float | None = None) -> None:
        self.metric, self.mode, self.total, self.epochs, self.log_path = metric, mode, total_trials, epochs, log_path
        self.time_budget_s = time_budget_s
        self.clock: Any = None  # the sweep's time-budget clock (budget.Clock): its earlier runs, less pauses
        self.start = time.time()
        self.last_said = 0.0
        self.best: tuple[float, str, dict[str, Any]] | None = None
        self.iterations: dict[str, int] = {}
        self.last_event = self.start  # a trial started, reported or ended

    def record(self, event: dict[str, Any]) -> None:
        try:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(json.dumps({"time": round(time.time(), 3), **event}, default=str) + "\n")
        except OSError:  # the log is a convenience; the results are in Ray storage and MLflow
            pass

    def seen(self, trials: list[Any]) -> None:
        """Every trial of the sweep Tune knows, the ones a resumed run restored included: their best value (as
        Tune recorded it) and their epochs count towards the line from the first step on."""
        for t in trials:
            if t.trial_id in self.iterations:
                continue
            last = t.last_result or {}
            self.iterations[t.trial_id] = int(last.get("training_iteration", 0) or 0)
            best = ((getattr(t, "metric_analysis", None) or {}).get(self.metric) or {}).get(self.mode)
            if isinstance(best, int | float) and math.isfinite(best) and abs(best) < 1e30:  # 1e30: a NaN's stand-in
                self._better(float(best), t.trial_id, dict(t.config or {}))

    def _better(self, value: float, trial_id: str, config: dict[str, Any]) -> None:
        better = self.best is None or (value > self.best[0] if self.mode == "max" else value < self.best[0])
        if better:
            self.best = (value, trial_id, {k: v for k, v in config.items() if not str(k).startswith("_")})

    def early(self, trials: list[Any]) -> int:
        """Trials that ended before their epoch budget (a scheduler stopped them), by Tune's own count."""
        n = 0
        for t in trials:
            budget = (t.config or {}).get("epochs", self.epochs)
            done = (t.last_result or {}).get("training_iteration", 0) or 0
            n += bool(t.status == "TERMINATED" and budget and done < budget)
        return n

    def result(self, trial_id: str, config: dict[str, Any], result: dict[str, Any]) -> None:
        self.last_event = time.time()
        self.iterations[trial_id] = int(result.get("training_iteration", 0))
        value = result.get(self.metric)
        self.record({"trial": trial_id, "iteration": self.iterations[trial_id], self.metric: value})
        if isinstance(value, int | float) and math.isfinite(value) and not result.get("sweeps/nonfinite"):
            self._better(float(value), trial_id, config)

    def line(self, statuses: list[str], early: int, final: bool = False) -> str:
        counts = {s: statuses.count(s) for s in set(statuses)}
        done, failed = counts.get("TERMINATED", 0), counts.get("ERROR", 0)
        text = (f"trials: {counts.get('RUNNING', 0)} running, {done} done ({early} stopped early), {failed} failed, "
                f"{counts.get('PENDING', 0) + counts.get('PAUSED', 0)} waiting")
        if self.best is not None:
            value, tid, config = self.best
            text += f" | best {self.metric} {value:.4g} (trial {tid}: {config})"
        elapsed = time.time() - self.start
        text += f" | {_fmt_s(elapsed)} elapsed" + ("" if final else self._left(elapsed))
        return text

    def left_text(self) -> str:
        """What is left, in words ("" when nothing can be said)."""
        return self._left(time.time() - self.start).removeprefix(", ")

    def _left(self, elapsed: float) -> str:
        quiet = time.time() - self.last_event
        if quiet >= QUIET_S:  # an estimate from past progress would claim progress that is not happening
            return f", no trial started or reported for {_fmt_s(quiet)}"
        if self.time_budget_s is not None and (self.total is None or self.epochs is None):
            used = self.clock.used() if self.clock is not None else elapsed
            return f", {_fmt_s(max(self.time_budget_s - used, 0))} of the time budget left"
        done = sum(self.iterations.values())
        if self.total is None or self.epochs is None or done == 0:
            return ""
        left = max(self.total * self.epochs - done, 0) * elapsed / done
        return f", at most ~{_fmt_s(left)} left (less if trials stop early)"


def progress_callback(progress: Progress, name: str = "") -> Any:
    """The Tune callback that feeds ``progress`` and logs its status line every ``EVERY_S`` seconds. The line
    counts and ranks every trial of the sweep: the run ``name``'s, and those of the sweep's earlier experiments
    (an extension's, :func:`sweeps.execution.run.session.earlier`)."""
    from ray.tune import Callback

    from sweeps.execution.run import session

    class ProgressCallback(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.state = progress

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            self.state.result(trial.trial_id, trial.config, result)

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.state.last_event = time.time()

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.state.last_event = time.time()
            self.state.record({"trial": trial.trial_id, "status": "TERMINATED"})

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.state.record({"trial": trial.trial_id, "status": "ERROR"})

        def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
            now = time.time()
            every = [*session.earlier(name), *trials] if name else trials
            self.state.seen(every)
            if now - self.state.last_said >= EVERY_S and trials:
                self.state.last_said = now
                log.info("%s", self.state.line([t.status for t in every], self.state.early(every)))

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            every = [*session.earlier(name), *trials] if name else trials
            self.state.seen(every)
            log.info("%s", self.state.line([t.status for t in every], self.state.early(every), final=True))

    return ProgressCallback()
