"""Every trial ends at its epoch budget, counted by Tune, under each of Ray's schedulers the config offers.

Real Tune on a small real Ray (``local_ray``): a function trainable (no Train) that would report far past its
budget, the scheduler :func:`sweeps.execution.tuning.searchers.build_scheduler` builds from the config, and the
stopper the sweep's Tuner gets (:func:`sweeps.execution.run.assembly.stopper`). Plus the stopper's own rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sweeps.config import build as config_build
from sweeps.config import compose

REPO = Path(__file__).resolve().parent.parent
EPOCHS = 4  # the budget; every scheduler below decides at epoch 2 (PBT/PB2 perturb, ASHA/median grace)
MUTATIONS = {"pbt": ["scheduler.hyperparam_mutations={lr: {dist: uniform, low: 0.001, high: 0.1}}"],
             "pb2": ["scheduler.hyperparam_bounds={lr: [0.001, 0.1]}"]}


def _endless() -> Any:
    """A trainable that reports (with a checkpoint) three times its budget unless Tune stops it; it resumes
    from Tune's checkpoint after a pause. Built here, so Ray pickles it by value (tests/ is not importable
    in Ray's workers)."""

    def endless(config: dict[str, Any]) -> None:
        import json
        import os
        import tempfile

        from ray import tune

        step, ckpt = 0, tune.get_checkpoint()
        if ckpt is not None:
            with ckpt.as_directory() as d, open(os.path.join(d, "step.json")) as f:
                step = json.load(f)
        while step < 3 * EPOCHS:
            step += 1
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "step.json"), "w") as f:
                    json.dump(step, f)
                tune.report({"val/acc": config["lr"] * step}, checkpoint=tune.Checkpoint.from_directory(d))

    return endless


@pytest.mark.parametrize("scheduler", ["pbt", "pb2", "hyperband", "median", "asha", "fifo"])
def test_every_scheduler_stops_trials_at_their_budget_counted_by_tune(
        scheduler: str, local_ray: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 trials on 2 CPUs (one waits: PBT pauses the others at its perturbation point). Each trial ends at
    the budget, or earlier where the scheduler itself said STOP; Tune never asks the scheduler about a result
    at the budget, so no decision of its own there (PBT's PAUSE: a restart for nothing) keeps a trial going."""
    from ray import tune
    from ray.tune.schedulers import TrialScheduler

    from sweeps.execution.run.assembly import stopper
    from sweeps.execution.tuning.searchers import build_scheduler

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(REPO / "conf"))
    spec = config_build.build_spec(compose.compose([
        "+experiment=quickstart", f"scheduler={scheduler}", f"trainable.params.epochs={EPOCHS}",
        *MUTATIONS.get(scheduler, [])]))
    sched = build_scheduler(spec)  # Ray's own class, as the sweep builds it
    asked: list[tuple[str, int, str]] = []  # what Tune asked the real scheduler, and its decision
    decide = sched.on_trial_result

    def recorded(controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision: str = decide(controller, trial, result)
        asked.append((trial.trial_id, int(result["training_iteration"]), decision))
        return decision

    sched.on_trial_result = recorded
    grid = tune.Tuner(
        _endless(), param_space={"lr": tune.grid_search([0.001, 0.01, 0.1])},
        tune_config=tune.TuneConfig(metric=spec.sweep.metric, mode=spec.sweep.mode, scheduler=sched),
        run_config=tune.RunConfig(storage_path=str(local_ray / scheduler), stop=stopper(spec), verbose=0),
    ).fit()
    assert not grid.errors, grid.errors
    assert spec.trainable.epochs == EPOCHS and len(grid) == 3
    stopped_by_scheduler = {(t, i) for t, i, d in asked if d == TrialScheduler.STOP}
    for result in grid:
        reported = list(result.metrics_dataframe["training_iteration"])
        last = result.metrics["training_iteration"]
        assert max(reported) == last <= EPOCHS, (reported, asked)
        assert last == EPOCHS or (result.metrics["trial_id"], last) in stopped_by_scheduler, (reported, asked)
    assert asked and all(i < EPOCHS for _, i, _ in asked), f"the scheduler decided at the budget: {asked}"
    if scheduler in ("pbt", "pb2"):  # its decisions were live: it paused trials, which resumed and still ended
        assert TrialScheduler.PAUSE in {d for _, _, d in asked}, asked


def test_the_budget_is_counted_in_tune_iterations_and_a_searched_epochs_wins() -> None:
    from sweeps.execution.run.budget import Budget

    stop = Budget(4)
    assert not stop("t", {"training_iteration": 3, "epoch": 3, "config": {"lr": 0.1}})
    assert stop("t", {"training_iteration": 4, "epoch": 3, "config": {"lr": 0.1}}), "a 0-based epoch is not trusted"
    assert not stop("u", {"training_iteration": 4, "config": {"epochs": 6}}), "a searched epoch budget wins"
    assert stop("u", {"training_iteration": 6, "config": {"epochs": 6}})
    assert stop("v", {"training_iteration": 9}), "past the budget"


def test_a_trial_that_keeps_restarting_is_stopped_at_twice_its_budget() -> None:
    from sweeps.execution.run.budget import OVERRUN, Budget

    stop = Budget(3)
    rewound = [{"training_iteration": i % 2 + 1, "config": {}} for i in range(OVERRUN * 3)]
    assert [stop("t", r) for r in rewound] == [False] * (OVERRUN * 3 - 1) + [True]
