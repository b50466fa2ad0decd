"""Which trials run in their own process, and what they hold (issue 51), fast: the plan's choice, the lever's probe,
Tune's actor reuse and the dry-run's line. The sweeps themselves: tests/test_inprocess_slow.py."""

from __future__ import annotations

import types
from typing import Any

import pytest

from sweeps.execution.levers import core, local_train
from sweeps.execution.resources import plan
from sweeps.ops.prepare import dry_run, prepare

QUICK = ["+experiment=quickstart"]


def _spec(*overrides: str) -> Any:
    return prepare([*QUICK, *overrides])


@pytest.mark.parametrize(("overrides", "inside", "workers", "per_trial"), [
    (["trainable.num_workers=1"], True, 0, {"CPU": 1.0}),
    (["trainable.num_workers=1", "trainable.resources_per_worker.CPU=2"], True, 0, {"CPU": 2.0}),
    (["trainable.num_workers=2"], False, 2, {"CPU": 3.0}),
    (["trainable.num_workers=1", "trainable.in_process=false"], False, 1, {"CPU": 2.0}),
    (["trainable.num_workers=0"], True, 0, {"CPU": 1.0}),
    (["trainable.num_workers=1", "trainable.use_gpu=true", "cluster.num_gpus=1"], False, 1,
     {"CPU": 2.0, "GPU": 1.0}),
    (["trainable.num_workers=0", "trainable.use_gpu=true", "cluster.num_gpus=1"], True, 0, {"CPU": 1.0, "GPU": 1.0}),
    (["trainable.num_workers=1", "trainable.use_gpu=true", "trainable.in_process=true", "cluster.num_gpus=1"], True,
     0, {"CPU": 1.0, "GPU": 1.0}),
])
def test_the_plan_runs_single_process_trials_in_their_own_process(overrides: list[str], inside: bool, workers: int,
                                                                 per_trial: dict[str, float]) -> None:
    spec = _spec(*overrides)
    assert (plan.in_process(spec), plan.workers(spec), plan.per_trial(spec)) == (inside, workers, per_trial)


def test_a_script_trainable_keeps_its_worker_group(tmp_path: Any) -> None:
    from dataclasses import replace

    spec = _spec("trainable.num_workers=1")
    script = replace(spec, trainable=replace(spec.trainable, script={"path": "train.py"}))
    assert not plan.in_process(script) and plan.workers(script) == 1


@pytest.mark.parametrize("switch", [(core.OFF, "local_train"), (core.TEST_RAY_VERSION, "2.40.0")])
def test_where_the_lever_does_not_apply_a_worker_group_of_one_runs(monkeypatch: pytest.MonkeyPatch,
                                                                   switch: tuple[str, str]) -> None:
    monkeypatch.setenv(*switch)
    for workers in ("0", "1"):
        spec = _spec(f"trainable.num_workers={workers}")
        assert (plan.in_process(spec), plan.workers(spec), plan.per_trial(spec)) == (False, 1, {"CPU": 2.0})


def test_trials_in_their_own_process_reuse_it_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.tuning.tuner import reuse_actors

    monkeypatch.delenv("SWEEPS_REUSE_ACTORS", raising=False)
    assert reuse_actors(_spec("trainable.num_workers=1")) is True
    assert reuse_actors(_spec("trainable.num_workers=2")) is False
    monkeypatch.setenv("SWEEPS_REUSE_ACTORS", "0")
    assert reuse_actors(_spec("trainable.num_workers=1")) is False


def test_the_dry_run_says_where_the_trials_run() -> None:
    inside = dry_run(_spec("trainable.num_workers=1"))
    assert "per trial      : CPU=1 (in the trial's own process, reused for the next trial)" in inside, inside
    assert "driver + 2 worker(s) x CPU=1" in dry_run(_spec("trainable.num_workers=2"))


def test_the_trial_asks_tune_for_what_it_trains_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial in its own process holds its worker's resources (its GPU too); a worker-group trial its driver's."""
    from sweeps.execution.resources.plan import TRIAL_SLOT
    from sweeps.execution.tuning.tuner import trainable

    def held(*overrides: str) -> dict[str, float]:
        resources = trainable(_spec(*overrides), "s1").__dict__.get("_resources") or {}
        return {k: v for k, v in getattr(resources, "required_resources", resources).items() if v}

    assert held("trainable.num_workers=0", "trainable.use_gpu=true", "cluster.num_gpus=1") == {
        "CPU": 1.0, "GPU": 1.0, TRIAL_SLOT: 1.0}
    assert held("trainable.num_workers=2") == {"CPU": 1.0, TRIAL_SLOT: 1.0}


def test_the_lever_probe_passes_on_the_installed_ray_and_refuses_a_moved_surface(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not core.installed("ray").startswith(local_train.LEVER.checked):
        pytest.skip("the installed Ray is not one the lever was read against")
    assert core.why_not(local_train.LEVER) is None
    import importlib

    utils = importlib.import_module(local_train.MODULE)

    class Moved(utils.LocalTrainFnUtils):  # type: ignore[misc,name-defined]
        def report(self, values: dict[str, Any]) -> None:  # type: ignore[override]
            pass

    monkeypatch.setattr(utils, "LocalTrainFnUtils", Moved)
    assert "not (metrics, checkpoint" in (core.why_not(local_train.LEVER) or "")
    monkeypatch.setattr(utils, "LocalTrainFnUtils", types.SimpleNamespace)
    assert "LocalTrainFnUtils has no" in (core.why_not(local_train.LEVER) or "")
