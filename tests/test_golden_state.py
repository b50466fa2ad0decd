"""A stopped sweep's Tune state, as each Ray of the supported range wrote it, read back by the installed Ray the way
``sweeps resume`` and ``extend`` read it. Fast tier: no Ray is started.

``tests/golden/<ray version>/<experiment>/`` holds an interrupted ASHA sweep (Optuna searching) and an interrupted
PBT sweep, written by ``scripts/golden_state.py`` with that Ray: ``tuner.pkl``, the experiment state, the
searcher's state, the callbacks' state with the scheduler's (as ``schedstate`` saves it), each trial's
``result.json`` and latest checkpoint, and ``expected.json`` (what the writing Ray read back). A Ray whose Tune
cannot restore them, reads other trials or statuses, or whose schedulers no longer take their saved state, fails
here instead of in a user's resume.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sweeps.execution.levers import core, scheduler_state
from sweeps.execution.run import recovery, schedstate

GOLDEN = Path(__file__).parent / "golden"
SETS = sorted((v.name, e.name) for v in GOLDEN.iterdir() if v.is_dir() for e in v.iterdir() if e.is_dir())
UNFINISHED = ("PENDING", "RUNNING", "PAUSED")


def train(config: dict[str, Any]) -> None:
    """The golden Tuner's trainable, by name (``Tuner.restore`` refuses another); never run here."""


def _copy(version: str, name: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The set in a folder of its own (a resume may write into it), and what the Ray that wrote it read back."""
    experiment = tmp_path / name
    shutil.copytree(GOLDEN / version / name, experiment)
    return experiment, json.loads((experiment / "expected.json").read_text())


def _scheduler(kind: str) -> Any:
    """A fresh scheduler as the golden sweep built it (a resumed sweep builds its scheduler anew from its spec)."""
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    if kind == "AsyncHyperBandScheduler":
        return ASHAScheduler(time_attr="training_iteration", max_t=4, grace_period=1, reduction_factor=2,
                             metric="score", mode="max")
    return PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2, metric="score",
                                   mode="max", hyperparam_mutations={"lr": [0.001, 0.01, 0.1]})


def _range() -> tuple[str, str]:
    """The floor and the newest minor of pyproject.toml's Ray range (``>=2.53,<2.61``: 2.53 and 2.60)."""
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    (ray,) = [r for r in map(Requirement, deps) if r.name == "ray"]
    bounds = {s.operator: s.version.split(".") for s in ray.specifier}
    floor, below = bounds[">="], bounds["<"]
    return f"{floor[0]}.{floor[1]}", f"{below[0]}.{int(below[1]) - 1}"


def test_the_golden_sets_cover_the_supported_range() -> None:
    written = {v.rsplit(".", 1)[0] for v, _ in SETS}
    assert written >= set(_range()), f"run scripts/golden_state.py with each Ray of {_range()} (a new floor or " \
                                     f"ceiling of the Ray range gets its golden set before it is released)"
    assert all({n for v2, n in SETS if v2 == v} == {"asha", "pbt"} for v, _ in SETS), SETS
    sizes = {p: p.stat().st_size for p in GOLDEN.rglob("*") if p.is_file()}
    assert max(sizes.values()) < 64 * 1024, "golden files stay small: no real checkpoints, few trials"


@pytest.mark.parametrize(("version", "name"), SETS)
def test_tune_restores_a_golden_state_as_resume_does(version: str, name: str, tmp_path: Path) -> None:
    from ray import tune

    experiment, _ = _copy(version, name, tmp_path)
    assert recovery.unrestorable(str(experiment)) is None
    assert recovery.repair(str(experiment), "s-golden") == [], "nothing is damaged: nothing is put back"
    assert tune.Tuner.can_restore(str(experiment))
    tune.Tuner.restore(str(experiment), trainable=train, resume_unfinished=True, resume_errored=False,
                       restart_errored=False)
    assert recovery.keep_state(str(experiment)), "the last good state set is kept from the restored files"


@pytest.mark.parametrize(("version", "name"), SETS)
def test_a_golden_state_reads_back_the_trials_and_statuses_its_ray_wrote(version: str, name: str,
                                                                        tmp_path: Path) -> None:
    from ray.tune import ExperimentAnalysis

    experiment, expected = _copy(version, name, tmp_path)
    trials = ExperimentAnalysis(str(experiment)).trials  # as resume's earlier_trials and the reports read them
    got = {t.trial_id: {"status": t.status, "iteration": (t.last_result or {}).get("training_iteration")}
           for t in trials}
    assert got == expected["trials"]
    assert any(t["status"] in UNFINISHED for t in got.values()), "an interrupted sweep: something to resume"
    named = [Path(t.checkpoint.path) for t in trials if t.checkpoint is not None]
    assert named and all(p.is_relative_to(experiment) and p.is_dir() for p in named), \
        "the checkpoints a resume starts from, found where the experiment now is"


@pytest.mark.parametrize(("version", "name"), SETS)
def test_a_golden_scheduler_state_comes_back_onto_a_fresh_scheduler(version: str, name: str,
                                                                   tmp_path: Path) -> None:
    from ray.tune import ExperimentAnalysis

    experiment, expected = _copy(version, name, tmp_path)
    state = schedstate.saved_state([str(experiment)])
    assert state is not None and {k: state[k] for k in ("kind", "how")} == {
        k: expected["scheduler"][k] for k in ("kind", "how")}
    fresh = _scheduler(state["kind"])
    why = schedstate.apply(fresh, state, {t.trial_id: t for t in ExperimentAnalysis(str(experiment)).trials})
    if state["how"] == "own":  # ASHA's own save: its rungs, milestone -> {trial id: score}
        assert why is None
        rungs = [{str(m): dict(sorted(r.items())) for m, r in b._rungs} for b in fresh._brackets]
        assert rungs == expected["scheduler"]["rungs"]
    elif state["how"] == "lever" and core.installed("ray").startswith(scheduler_state.LEVER.checked) and \
            not os.environ.get(core.OFF):
        assert core.reason(scheduler_state.LEVER) is None and why is None, "a Ray the lever was checked on"
        population = {k: list(v) for k, v in (scheduler_state.population(fresh) or {}).items()}
        assert population == expected["scheduler"]["population"]
    else:  # written where the lever was off (2.53), or read where it is: the resume says what starts empty
        assert why and "population's scores" in schedstate.differs(state["kind"], why)


@pytest.mark.parametrize("version", sorted({v for v, _ in SETS}))
def test_a_golden_searcher_state_restores_the_searcher_extend_continues(version: str, tmp_path: Path) -> None:
    from ray.tune.search.basic_variant import BasicVariantGenerator
    from ray.tune.search.optuna import OptunaSearch

    experiment, expected = _copy(version, "asha", tmp_path)
    searcher = OptunaSearch()
    searcher.restore_from_dir(str(experiment))  # as searchers.restored_searcher does for `extend`
    assert set(searcher._ot_trials) == set(expected["trials"]), "the study knows every trial it suggested"
    suggested = searcher.suggest("golden-next")
    assert isinstance(suggested, dict) and 1e-3 <= suggested["lr"] <= 1e-1
    experiment, _ = _copy(version, "pbt", tmp_path)
    generator = BasicVariantGenerator()
    assert generator.has_checkpoint(str(experiment))
    generator.restore_from_dir(str(experiment))
