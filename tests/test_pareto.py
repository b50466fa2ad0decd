"""Multi-objective sweeps, the pure parts: dominance, Pareto ranks, feasibility, the promotion rule, and the
combinations refused before launch."""

from __future__ import annotations

from typing import Any

import pytest

from sweeps.cli.main import main
from sweeps.config.spec import Constraint, Objective
from sweeps.reports import pareto
from sweeps.reports.results import TrialRecord

ACC, PARAMS = Objective("val/acc", "max"), Objective("model/params", "min")


def _trial(tid: str, acc: float, params: float, status: str = "TERMINATED") -> TrialRecord:
    history = [{"training_iteration": 1.0, "val/acc": acc - 0.1, "model/params": params},
               {"training_iteration": 2.0, "val/acc": acc, "model/params": params}]
    return TrialRecord(tid, status, {"h": params}, history)


def test_dominance_and_ranks() -> None:
    modes = ["max", "min"]
    assert pareto.dominates((0.9, 100), (0.8, 200), modes)
    assert not pareto.dominates((0.9, 300), (0.8, 200), modes), "better in one, worse in the other"
    assert not pareto.dominates((0.9, 100), (0.9, 100), modes), "equal points do not dominate"
    assert pareto.ranks([(0.9, 300), (0.8, 200), (0.7, 250), (0.95, 1000)], modes) == [1, 1, 2, 1]


def test_points_use_the_row_of_the_best_primary_and_put_feasible_first() -> None:
    trials = [_trial("a", 0.90, 300), _trial("b", 0.80, 200), _trial("c", 0.97, 9000), _trial("d", 0.70, 250),
              _trial("e", 0.99, 100, status="ERROR")]
    pts = pareto.points(trials, (ACC, PARAMS), (Constraint("model/params", "<=", 5000),))
    by_id = {p.trial_id: p for p in pts}
    assert "e" not in by_id, "a failed trial is never a point"
    assert by_id["a"].values == (0.90, 300) and by_id["c"].feasible is False
    assert [p.trial_id for p in pareto.front(pts)] == ["a", "b"], "c is infeasible, d is dominated by b"
    assert pts[-1].trial_id == "c", "infeasible trials come last"


@pytest.mark.parametrize(("rule", "picked"), [("best_primary", "a"), ("cheapest_within:15", "b"),
                                              ("cheapest_within:1", "a")])
def test_the_promotion_rule_picks_from_the_feasible_front(rule: str, picked: str) -> None:
    pts = pareto.points([_trial("a", 0.90, 300), _trial("b", 0.80, 200), _trial("c", 0.97, 9000)], (ACC, PARAMS),
                        (Constraint("model/params", "<=", 5000),))
    chosen = pareto.pick(pts, (ACC, PARAMS), rule)
    assert chosen is not None and chosen.trial_id == picked and chosen.feasible


OBJ = "sweep.objectives=[{metric: val/acc, mode: max}, {metric: model/params, mode: min}]"


@pytest.mark.parametrize(("argv", "says"), [
    (["+experiment=digits_pareto", "searcher=hyperopt"], "HyperOpt optimizes one objective"),
    (["+experiment=digits_pareto", "searcher.sampler._target_=optuna.samplers.CmaEsSampler"],
     "CmaEsSampler optimizes one objective"),
    (["+experiment=quickstart", "sweep.objectives=[{metric: val/acc, mode: min}, {metric: model/params, mode: min}]"],
     "must hold the primary objective"),
    (["+experiment=quickstart", "sweep.objectives=[{metric: val/acc, mode: max}, {metric: val/nope, mode: min}]"],
     "'val/nope' is not reported"),
    (["+experiment=digits_pareto", "sweep.constraints={model/params: 'about 5000'}"], "is not a bound"),
    (["+experiment=quickstart", "promote.rule=cheapest_within:1"], "needs sweep.objectives"),
    (["+experiment=quickstart", OBJ, "promote.rule=cheapest"], "is not a rule"),
])
def test_combinations_ray_or_optuna_cannot_run_are_refused(sweeps_env: Any, capsys: pytest.CaptureFixture,
                                                            argv: list[str], says: str) -> None:
    assert main(["run", *argv, "--dry-run"]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("lever", ["on", "off"])
def test_a_multi_objective_sweep_builds_optuna_with_every_objective_and_the_constraints(
        sweeps_env: Any, lever: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a trial's constraint values reach Optuna (the optuna_constraints lever: Trial.set_constraint;
    its fallback: the sampler's constraints_func): a completed trial's Optuna trial holds them."""
    from sweeps.execution.tuning.searchers import build_scheduler, build_searcher, param_space
    from sweeps.ops.prepare import prepare

    if lever == "off":
        monkeypatch.setenv("SWEEPS_LEVERS_OFF", "optuna_constraints")
    spec = prepare(["+experiment=digits_pareto", "sweep.constraints={model/params: '<= 5000'}"])
    searcher = build_searcher(spec, 0)
    optuna_search = searcher.searcher
    assert optuna_search._metric == ["val/acc", "model/params"] and optuna_search._mode == ["max", "min"]
    assert type(optuna_search._sampler).__name__ == "NSGAIISampler"
    searcher.set_search_properties(None, None, param_space(spec))
    config = searcher.suggest("t0")
    searcher.on_trial_complete("t0", {"val/acc": 0.9, "model/params": 9000.0, **config})
    (done,) = optuna_search._ot_study.trials
    assert list(done.constraints.values()) == [4000.0], "9000 params > 5000: infeasible by 4000"
    assert done.values == [0.9, 9000.0]
    scheduler = build_scheduler(spec)
    assert (scheduler._metric, scheduler._mode) == ("val/acc", "max"), "ASHA stops trials on the primary"


@pytest.mark.parametrize("lever", ["on", "off"])
@pytest.mark.parametrize("sampler", ["NSGAIISampler", "NSGAIIISampler"])
def test_a_genetic_samplers_searcher_pickles_as_tune_saves_it_and_still_suggests(
        sampler: str, lever: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tune pickles the searcher into tuner.pkl and its state files; optuna 5.1's GA samplers hold a lock (the
    optuna_ga_lock lever swaps it; its fallback carries the sampler in a proxy that pickles as its config)."""
    import pickle

    import ray.cloudpickle as cloudpickle

    from sweeps.config import build, compose
    from sweeps.execution.tuning.searchers import build_searcher, param_space

    if lever == "off":
        monkeypatch.setenv("SWEEPS_LEVERS_OFF", "optuna_ga_lock")

    spec = build.build_spec(compose.compose(["+experiment=digits_pareto",
                                             f"searcher.sampler._target_=optuna.samplers.{sampler}"]))
    searcher = build_searcher(spec, 0)
    assert type(searcher._sampler).__name__ == (sampler if lever == "on" else "Rebuilt")
    for dumps, loads in ((cloudpickle.dumps, cloudpickle.loads), (pickle.dumps, pickle.loads)):
        clone = loads(dumps(searcher))
        clone.set_search_properties(None, None, param_space(spec))
        assert set(clone.suggest("t0")) >= set(spec.space), "the unpickled searcher suggests a full configuration"
