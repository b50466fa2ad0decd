"""Which trial a promotion takes (pure): the Pareto front by rule, the confirmed winner by its pessimistic bound,
and the gate on the same rule."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sweeps.config import stored
from sweeps.errors import BadInput, GateRefused
from sweeps.registry import choice, gate
from sweeps.reports.results import TrialRecord
from sweeps.trials import config_digest

CONFIG = {"sweep": {"metric": "val/acc", "objectives": [{"metric": "val/acc", "mode": "max"},
                                                         {"metric": "model/params", "mode": "min"}],
                    "constraints": {"model/params": "<= 5000"}},
          "promote": {"rule": "cheapest_within:1"}}


def _trial(tid: str, acc: float, params: float, lr: float = 0.1, seed: int | None = None) -> TrialRecord:
    history = [{"training_iteration": 1.0, "val/acc": acc, "model/params": params}]
    p: dict[str, Any] = {"lr": lr} if seed is None else {"lr": lr, "seed": seed}
    return TrialRecord(tid, "TERMINATED", p, history)


def _rec(**kw: Any) -> Any:
    base = {"sweep_id": "s1", "metric": "val/acc", "mode": "max", "config": CONFIG, "confirmed": [],
            "confirm_dirs": []}
    return SimpleNamespace(**{**base, **kw})


TRIALS = [_trial("big", 0.960, 4000), _trial("small", 0.955, 900), _trial("tiny", 0.90, 100),
          _trial("huge", 0.99, 90000)]


def test_front_choice_follows_the_rule_and_never_takes_an_infeasible_trial() -> None:
    rec = _rec()
    assert choice.front_choice(rec, TRIALS, "best_primary").trial_id == "big", "huge breaks the constraint"
    picked = choice.front_choice(rec, TRIALS, choice.rule_of(stored.read(rec.config), None))
    assert picked.trial_id == "small" and picked.rule == "cheapest_within:1", "within 1% of 0.96, cheaper"
    assert picked.tags[choice.VERSION_TAG_SECOND_VALUE] == "900.0" and picked.value == pytest.approx(0.955)
    assert choice.front_choice(_rec(config={"sweep": {}}), TRIALS, "best_primary") is None, "one objective"
    with pytest.raises(BadInput, match="no feasible trial"):
        choice.front_choice(rec, [_trial("huge", 0.99, 90000)], "best_primary")


def test_the_gate_compares_on_the_same_rule() -> None:
    tags = {choice.VERSION_TAG_SECOND_METRIC: "model/params", choice.VERSION_TAG_SECOND_MODE: "min",
            choice.VERSION_TAG_SECOND_VALUE: "900"}
    champ = gate.Champion("1", "val/acc", "max", 0.955, tags=tags)
    cheaper = ("model/params", "min", 500.0)
    ok = gate.gate(champ, name="m", alias="champion", metric="val/acc", mode="max", value=0.951,
                   rule="cheapest_within:1", second=cheaper)
    assert ok and "rule cheapest_within:1" in ok, "within 1% and cheaper: takes the alias"
    with pytest.raises(GateRefused, match="under rule"):
        gate.gate(champ, name="m", alias="champion", metric="val/acc", mode="max", value=0.958,
                  rule="cheapest_within:1", second=("model/params", "min", 2000.0))  # better but dearer
    assert gate.gate(champ, name="m", alias="champion", metric="val/acc", mode="max", value=0.99,
                     rule="cheapest_within:1", second=("model/params", "min", 2000.0)), "better by > 1%"
    with pytest.raises(GateRefused):  # the plain rule: only the primary metric counts
        gate.gate(champ, name="m", alias="champion", metric="val/acc", mode="max", value=0.951,
                  rule="best_primary", second=cheaper)


def test_confirmed_choice_takes_the_winner_by_its_pessimistic_bound() -> None:
    win, other = {"lr": 0.03}, {"lr": 0.1}
    confirmed = [{"digest": config_digest(win), "params": win, "n": 2, "mean": 0.93, "pessimistic": 0.91},
                 {"digest": config_digest(other), "params": other, "n": 2, "mean": 0.95, "pessimistic": 0.80}]
    reruns = [_trial("w1", 0.92, 1, lr=0.03, seed=1), _trial("w2", 0.94, 1, lr=0.03, seed=2),
              _trial("o1", 0.99, 1, lr=0.1, seed=1)]
    picked = choice.confirmed_choice(_rec(confirmed=confirmed), reruns)
    assert picked.trial_id == "w2" and picked.value == 0.91, "the winner's best re-run, gated on its bound"
    assert picked.tags[choice.VERSION_TAG_CONFIRMED] == "true" and picked.tags[choice.VERSION_TAG_BOUND] == "0.91"
    with pytest.raises(BadInput, match="sweeps confirm s1"):
        choice.confirmed_choice(_rec(), reruns)
