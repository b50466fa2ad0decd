"""A real multi-objective sweep on digits: accuracy against parameter count under NSGA-II with ASHA stopping on
accuracy, and a size constraint that excludes part of the space."""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import pytest
from conftest import FAST, mlflow_client
from harness import Sweep

pytestmark = pytest.mark.slow


POINTS = [f"{{hidden_size: {h}, num_layers: 1, lr: 0.03, batch_size: 32, weight_decay: 0.0001}}"
          for h in (4, 8, 16, 96)]  # parameters 310, 610, 1210 (accuracy rises with size there), 7210 (> 5000)


def test_nsga2_with_asha_front_constraint_and_tags(sweep: Sweep) -> None:
    env = sweep.env
    proc = env.run("run", "+experiment=digits_pareto", "sweep.num_samples=4", "trainable.params.epochs=3",
                   "scheduler.grace_period=1", "trainable.num_workers=1",
                   "search_space.hidden_size={dist: choice, values: [4, 8, 16, 32, 64, 96]}",
                   "+search_space.num_layers={dist: choice, values: [1, 2]}",
                   "search_space.lr={dist: choice, values: [0.03]}", "sweep.constraints={model/params: '<= 5000'}",
                   "search_space.batch_size={dist: choice, values: [32]}",
                   "search_space.weight_decay={dist: choice, values: [0.0001]}",
                   # the 4 trials are these points (NSGA-II's first generation would be random): three small
                   # sizes (a front), one too big
                   f"sweep.points_to_evaluate=[{','.join(POINTS)}]", *FAST, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = Sweep.only(env).record()
    rows = list(csv.DictReader((env.root / "reports" / "digits_pareto" / rec["sweep_id"] / "trials.csv").open()))
    # the front, computed here from trials.csv alone: feasible points no other feasible point dominates
    pts = {r["trial_id"]: (float(r["point/val/acc"]), float(r["point/model/params"])) for r in rows
           if r["point/val/acc"]}
    feasible = {t for t, (_, p) in pts.items() if p <= 5000}
    def dominated(t: str) -> bool:
        a, p = pts[t]
        return any(b >= a and q <= p and (b > a or q < p) for u, (b, q) in pts.items() if u in feasible and u != t)
    expected = {t for t in feasible if not dominated(t)}
    reported = {r["trial_id"] for r in rows if r["on_front"] == "True"}
    assert reported == expected and len(expected) >= 3, (reported, expected, pts)
    assert all(r["feasible"] == str(pts[r["trial_id"]][1] <= 5000) for r in rows if r["trial_id"] in pts), \
        "no infeasible trial is shown as feasible"
    c = mlflow_client(env.tracking_uri)
    tagged = c.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.pareto` = 'true'")
    assert {r.data.tags["sweeps.trial_id"] for r in tagged} == expected
    report = (env.root / "reports" / "digits_pareto" / rec["sweep_id"] / "summary.md").read_text()
    assert "## Pareto front" in report and "model/params <= 5000" in report
    assert (env.root / "reports" / "digits_pareto" / rec["sweep_id"] / "pareto_front.png").is_file()
    # NSGA-II really ran through OptunaSearch: its study holds two objectives and the constraint values
    (state,) = Path(rec["experiment_dirs"][0]).glob("searcher-state-*.pkl")
    with state.open("rb") as f:
        saved = pickle.load(f)
    study = saved["_ot_study"] if isinstance(saved, dict) else saved._ot_study
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    done = [t for t in study.trials if t.values is not None]
    assert len(done) >= 4 and all(len(t.values) == 2 for t in done)
    assert any(k.startswith("constraints") for t in done for k in t.system_attrs), "constraints reached Optuna"
    assert type(study.sampler).__name__ == "NSGAIISampler"
    # promote picks from the front by the rule, and records the rule and the second objective on the version
    proc = env.run("promote", "latest", "--rule", "cheapest_within:5", "--model-name", "pareto-digits",
                   timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    version = c.get_model_version_by_alias("pareto-digits", "champion")
    best_acc = max(pts[t][0] for t in expected)
    near = {t for t in expected if pts[t][0] >= best_acc * 0.95}
    chosen = version.tags["trial_id"]
    assert chosen in near and pts[chosen][1] == min(pts[t][1] for t in near), (version.tags, pts)
    assert version.tags["promote_rule"] == "cheapest_within:5" and version.tags["pareto_front"] == "true"
    assert float(version.tags["second_value"]) == pts[chosen][1] <= 5000, "no infeasible trial promoted"
