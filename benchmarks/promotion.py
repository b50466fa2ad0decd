"""Promotion ASHA and PASHA against Ray's stopping ASHA, synchronous successive halving and random search, on
recorded learning curves (issue 50, part 2).

A replay, as ``tests/decisions.py`` does: each configuration's curve (one value a epoch, recorded from a real
full-budget sweep) is fed, epoch by epoch, to the real scheduler classes (Ray's ``ASHAScheduler`` and
``FIFOScheduler``, the project's ``PromotionASHA`` and ``PASHA``) through a small controller that behaves as
Tune's does for them: the searcher makes a new trial while fewer than ``slots`` trials run or wait (for the
promoting ones: less the promotions owed, as ``sweeps.execution.run.concurrency.PromotionsFirst``), the
scheduler's ``choose_trial_to_run`` is asked first when a slot is free and Tune then starts any PENDING trial,
a PAUSE keeps the trial's epoch as its checkpoint and a resumed trial continues from it. Each running trial
trains one epoch a tick. Synchronous successive halving is a direct driver (every configuration to a rung, the
best ``1/reduction_factor`` on to the next, from their checkpoints), since Ray's ``HyperBandScheduler`` runs
several brackets, not one.

Per method, over ``--orders`` random arrival orders of the configurations: how often the configuration it hands
the user (the best at the furthest epoch any trial reached: ``max_t``, or PASHA's top rung) is the one a
full-budget run ranks best, and the epochs spent when that configuration got there (median over the orders that
found it); epochs in all; ticks of wall time on the slots; the best value reported within the epochs synchronous
SH spends; where PASHA stopped raising.

    python benchmarks/promotion.py [--fixture benchmarks/fixtures/curves_digits.json] [--slots 1 2]
        [--orders 20] [--grace 1] [--rf 3] [--epsilon 0.0]
    python benchmarks/promotion.py --record EXPERIMENT_DIR --out benchmarks/fixtures/curves_digits.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "curves_digits.json"


class Trial:
    """What the schedulers read of a Tune trial (hashable by identity, as Tune's)."""

    def __init__(self, trial_id: str, index: int) -> None:
        self.trial_id, self.index, self.status = trial_id, index, "PENDING"
        self.config = self.evaluated_params = {"index": index}
        self.epoch = 0
        self.is_saving = False


class Replay:
    """One method on one arrival order of the curves: Tune's loop, as far as these schedulers see it."""

    def __init__(self, scheduler: Any, curves: list[list[float]], order: list[int], slots: int, metric: str,
                 mode: str) -> None:
        self.sched, self.curves, self.order, self.slots = scheduler, curves, order, slots
        self.metric, self.mode = metric, mode
        self.trials: list[Trial] = []
        self.spent = self.ticks = 0
        self.trace: list[tuple[int, float]] = []  # (epochs spent, value reported)
        self.reach: dict[tuple[int, int], int] = {}  # (configuration, epoch) -> epochs spent when it got there
        self.search_alg = SimpleNamespace(is_finished=lambda: len(self.trials) == len(self.order))
        scheduler.set_search_properties(metric, mode)

    # the controller's surface the schedulers call
    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.status != "TERMINATED"]

    def stop_trial(self, trial: Trial) -> None:
        if trial.status in ("PENDING", "PAUSED"):
            self.sched.on_trial_remove(self, trial)
        trial.status = "TERMINATED"

    def _count(self, *statuses: str) -> int:
        return sum(1 for t in self.trials if t.status in statuses)

    def _make_trials(self) -> None:
        owed = self.sched.promotable_count() if hasattr(self.sched, "promotable_count") else 0
        while len(self.trials) < len(self.order) and self._count("PENDING", "RUNNING") < max(0, self.slots - owed):
            trial = Trial(f"t{len(self.trials)}", self.order[len(self.trials)])
            self.trials.append(trial)
            self.sched.on_trial_add(self, trial)

    def _start_trials(self) -> bool:
        started = False
        while self._count("RUNNING") < self.slots:
            chosen = self.sched.choose_trial_to_run(self)
            if chosen is None or chosen.status not in ("PENDING", "PAUSED"):
                chosen = next((t for t in self.trials if t.status == "PENDING"), None)
            if chosen is None:
                break
            chosen.status, started = "RUNNING", True
        return started

    def _epoch(self, trial: Trial, max_t: int) -> None:
        trial.epoch += 1
        self.spent += 1
        value = self.curves[trial.index][trial.epoch - 1]
        self.trace.append((self.spent, value))
        self.reach[(trial.index, trial.epoch)] = self.spent
        result = {"training_iteration": trial.epoch, self.metric: value, "time_total_s": float(trial.epoch)}
        decision = self.sched.on_trial_result(self, trial, result)
        if decision == "PAUSE":
            trial.status = "PAUSED"
        elif decision == "STOP" or trial.epoch >= max_t:
            self.sched.on_trial_complete(self, trial, result)
            trial.status = "TERMINATED"

    def run(self, max_t: int) -> Replay:
        while True:
            self._make_trials()
            self._start_trials()
            running = [t for t in self.trials if t.status == "RUNNING"]
            if not running:
                self._make_trials()
                if not self._start_trials():
                    break
                continue
            self.ticks += 1
            for trial in running:
                self._epoch(trial, max_t)
        return self


def sync_sh(curves: list[list[float]], order: list[int], slots: int, levels: list[float], rf: float,
            sign: float) -> SimpleNamespace:
    """Synchronous successive halving: every configuration to the first rung, the best 1/rf on, from their
    checkpoints, rung by rung; a rung ends when its last trial reaches it (the slots wait)."""
    alive, spent, ticks, done = list(order), 0, 0, 0
    trace: list[tuple[int, float]] = []
    reach: dict[tuple[int, int], int] = {}
    for k, level in enumerate(int(x) for x in levels):
        for i in alive:
            for e in range(done, level):
                spent += 1
                trace.append((spent, curves[i][e]))
                reach[(i, e + 1)] = spent
        ticks += -(-len(alive) // slots) * (level - done)
        done = level
        if k < len(levels) - 1:
            keep = max(1, int(len(alive) / rf + 1e-9))
            alive = sorted(alive, key=lambda i: -sign * curves[i][level - 1])[:keep]
    return SimpleNamespace(spent=spent, ticks=ticks, trace=trace, reach=reach, sched=None)


def methods(max_t: int, grace: int, rf: float, epsilon: float) -> dict[str, Any]:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from sweeps.execution.tuning.promotion import PASHA, PromotionASHA

    kw = {"time_attr": "training_iteration", "max_t": max_t, "grace_period": grace, "reduction_factor": rf}
    return {"asha_promote": lambda: PromotionASHA(**kw), "pasha": lambda: PASHA(**kw, epsilon=epsilon),
            "asha (Ray, stopping)": lambda: ASHAScheduler(**kw), "random (FIFO, full)": FIFOScheduler}


def pick(r: Any, curves: list[list[float]], sign: float) -> tuple[int, int]:
    """What a method hands the user: the best configuration at the furthest epoch any reached (PASHA's top rung,
    ``max_t`` for the others), and the epochs spent when it got there."""
    top = max(e for _, e in r.reach)
    best = max((i for i, e in r.reach if e == top), key=lambda i: sign * curves[i][top - 1])
    return best, r.reach[(best, top)]


def best_within(trace: list[tuple[int, float]], budget: int, sign: float) -> float | None:
    seen = [v for spent, v in trace if spent <= budget]
    return max(seen, key=lambda v: sign * v) if seen else None


def compare(fixture: dict[str, Any], slots: int, orders: int, grace: int, rf: float, epsilon: float) -> None:
    from sweeps.execution.tuning.ladder import milestones

    curves, metric, mode = [c["curve"] for c in fixture["configs"]], fixture["metric"], fixture["mode"]
    max_t, sign = len(curves[0]), 1.0 if mode == "max" else -1.0
    truth = max(range(len(curves)), key=lambda i: sign * curves[i][-1])
    levels = milestones(max_t, grace, rf)
    makers = methods(max_t, grace, rf, epsilon)
    rows: dict[str, list[Any]] = {name: [] for name in ["sync SH (own driver)", *makers]}
    for seed in range(orders):
        order = list(range(len(curves)))
        random.Random(seed).shuffle(order)
        runs = {"sync SH (own driver)": sync_sh(curves, order, slots, levels, rf, sign)}
        runs.update({name: Replay(make(), curves, order, slots, metric, mode).run(max_t)
                     for name, make in makers.items()})
        equal = runs["sync SH (own driver)"].spent
        for name, r in runs.items():
            pasha = getattr(r.sched, "current_max_t", None)
            chosen, at = pick(r, curves, sign)
            rows[name].append((at if chosen == truth else None, r.spent, r.ticks, best_within(r.trace, equal, sign),
                               pasha))
    print(f"\n{len(curves)} configurations x {max_t} epochs of {metric} ({mode}); rungs {levels}; {slots} slot(s); "
          f"{orders} arrival orders; the full-budget best is configuration {truth} "
          f"({metric}={curves[truth][-1]:.4f})")
    head = f"{'method':24} {'found best':>10} {'epochs to find (median)':>24} {'epochs in all':>13} "
    head += f"{'ticks':>7} {'best at SH epochs':>18} {'PASHA top':>10}"
    print(head)
    for name, rs in rows.items():
        found = [r[0] for r in rs if r[0] is not None]
        med = f"{statistics.median(found):.0f}" if found else "miss"
        at = [r[3] for r in rs if r[3] is not None]
        tops = sorted({r[4] for r in rs if r[4] is not None})
        print(f"{name:24} {len(found):>5}/{len(rs):<4} {med:>24} {statistics.mean(r[1] for r in rs):>13.0f} "
              f"{statistics.mean(r[2] for r in rs):>7.0f} {statistics.mean(at):>18.4f} "
              f"{'/'.join(f'{t:g}' for t in tops) or '-':>10}")


def record(experiment_dir: Path, metric: str, mode: str) -> dict[str, Any]:
    """The fixture from a real full-budget sweep: each trial's config and its metric at every epoch."""
    configs = []
    for trial in sorted(p for p in experiment_dir.iterdir() if (p / "result.json").is_file()):
        rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines() if x.strip()]
        rows = sorted({r["training_iteration"]: r for r in rows}.values(), key=lambda r: r["training_iteration"])
        if rows:
            configs.append({"config": rows[-1]["config"], "curve": [round(float(r[metric]), 6) for r in rows]})
    epochs = max(len(c["curve"]) for c in configs)
    configs = [c for c in configs if len(c["curve"]) == epochs]
    return {"source": f"a real full-budget sweep ({experiment_dir.name})", "metric": metric, "mode": mode,
            "configs": configs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixture", type=Path, default=FIXTURE)
    p.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    p.add_argument("--orders", type=int, default=20)
    p.add_argument("--grace", type=int, default=1)
    p.add_argument("--rf", type=float, default=3)
    p.add_argument("--epsilon", type=float, default=0.0)
    p.add_argument("--record", type=Path, help="a Tune experiment folder to record the curves of")
    p.add_argument("--metric", default="val/loss")
    p.add_argument("--mode", default="min")
    p.add_argument("--out", type=Path, default=FIXTURE)
    a = p.parse_args()
    if a.record:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record(a.record, a.metric, a.mode), indent=1) + "\n")
        print(f"wrote {a.out}")
        return 0
    fixture = json.loads(a.fixture.read_text())
    for slots in a.slots:
        compare(fixture, slots, a.orders, a.grace, a.rf, a.epsilon)
    return 0


if __name__ == "__main__":
    sys.exit(main())
