"""A trial start's stages: the arithmetic on the driver, the points on the trial's side, the report's figures.
The real sweep's stages (MLflow runs, the report's table) are checked in tests/test_sweep_slow.py."""

from __future__ import annotations

import pytest

from sweeps.execution.train import startup as trial_side
from sweeps.execution.tuning import startup
from sweeps.reports import startup as report_side
from sweeps.reports.results import TrialRecord
from sweeps.reports.summary import collect

POINTS = {"fit": 103.0, "controller": 105.0, "loop": 109.0, "forward": 110.5, "pg_wait_s": 1.0}


def test_the_stages_are_the_spans_between_the_points_and_add_up_to_the_total() -> None:
    got = startup.stages(100.0, 111.0, POINTS)
    assert got == {"startup/pg_wait_s": 1.0, "startup/trial_actor_s": 2.0, "startup/train_controller_s": 2.0,
                   "startup/worker_group_s": 4.0, "startup/loop_setup_s": 1.5, "startup/first_epoch_s": 0.5,
                   "startup/total_s": 11.0}
    assert sum(v for k, v in got.items() if k != startup.TOTAL) == pytest.approx(got[startup.TOTAL])


def test_a_point_not_stamped_leaves_its_stage_out_and_its_seconds_in_the_next() -> None:
    got = startup.stages(100.0, 111.0, {"fit": 103.0, "controller": 105.0, "loop": 109.0})  # no forward pass
    assert "startup/loop_setup_s" not in got and got["startup/first_epoch_s"] == 2.0
    assert "startup/pg_wait_s" not in got and got["startup/trial_actor_s"] == 3.0
    assert sum(v for k, v in got.items() if k != startup.TOTAL) == pytest.approx(got[startup.TOTAL])


def test_a_placement_wait_longer_than_the_span_it_sits_in_is_capped() -> None:
    got = startup.stages(100.0, 111.0, {**POINTS, "pg_wait_s": 9.0})
    assert got["startup/pg_wait_s"] == 3.0 and got["startup/trial_actor_s"] == 0.0


def test_the_clock_takes_the_points_out_of_every_result_and_stages_only_a_starts_first() -> None:
    clock = startup.Clock()
    clock.ready("t1", at=100.0)
    clock.chosen("t1")  # a trial Tune added is not restarted by being chosen
    assert clock.began["t1"] == 100.0
    first = {"val/acc": 0.5, trial_side.KEY: dict(POINTS)}
    clock.on_result("t1", first)
    assert trial_side.KEY not in first and first["startup/total_s"] > 0
    later = {"val/acc": 0.6, trial_side.KEY: dict(POINTS)}  # a worker group restarted inside one start
    clock.on_result("t1", later)
    assert trial_side.KEY not in later and "startup/total_s" not in later


def test_rank_0s_first_report_carries_the_loop_and_its_first_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.train
    import torch

    sent: list[dict] = []
    monkeypatch.setattr(ray.train, "report", lambda metrics, *a, **k: sent.append(metrics))
    undo = trial_side.arm_worker(0, 42.0, skip="_seed")
    from ray.train import report  # a loop that binds report at import, after the arming

    report({"_seed": 1})  # sweeps' seeding report is not the loop's first
    torch.nn.Linear(2, 2)(torch.zeros(1, 2))
    mine = {"loss": 1.0}
    report(mine)
    report({"loss": 0.5})
    undo()
    assert ray.train.report is not report, "undone"
    assert trial_side.KEY not in sent[0] and trial_side.KEY not in mine, "the caller's dict is left alone"
    points = sent[1][trial_side.KEY]
    assert points["loop"] == 42.0 and points["forward"] >= 42.0
    assert trial_side.KEY not in sent[2]
    assert trial_side.arm_worker(1, 42.0, skip="_seed")() is None  # other ranks: nothing armed


def _trial(tid: str, total: float, first_epoch: float, pg_wait: float, train_s: float) -> TrialRecord:
    start = {"training_iteration": 1, "val/acc": 0.5, "time/compute_s": train_s / 2, "startup/total_s": total,
             "startup/first_epoch_s": first_epoch, "startup/pg_wait_s": pg_wait, "startup/worker_group_s": 3.0}
    return TrialRecord(tid, "TERMINATED", {"lr": 0.1},
                       [start, {"training_iteration": 2, "val/acc": 0.6, "time/compute_s": train_s / 2}])


def test_the_slot_seconds_split_into_starting_waiting_and_training() -> None:
    records = [_trial("a", 12.0, 1.0, 1.0, 20.0), _trial("b", 12.0, 1.0, 1.0, 20.0)]
    s = collect(records, "val/acc", "max", wall_s=50.0, slots=2)
    assert s.start_s_total == 20.0 and s.starts_measured == 2
    starting, waiting, training = s.split() or (0, 0, 0)
    assert (starting, training) == (pytest.approx(0.2), pytest.approx(0.4)) and waiting == pytest.approx(0.4)
    assert s.split_words() == "starting 20%, waiting 40%, training 40%"
    assert collect([TrialRecord("c", "TERMINATED", {}, [{"training_iteration": 1, "val/acc": 1.0}])], "val/acc",
                   "max", wall_s=5.0, slots=1).split() is None, "no start measured: no split stated"


def test_the_reports_stage_table_has_p50_and_p95_per_stage() -> None:
    starts = [{"startup/total_s": float(v), "startup/worker_group_s": v / 2} for v in range(1, 21)]
    t = report_side.table(starts)
    rows = {r[0]: r[1:] for r in t.rows}
    assert rows["total"][:2] == ["10.5", "19.05"] and rows["total"][3] == "20"
    assert "placement-group wait" not in rows, "a stage no start measured is left out"
    assert report_side.quantile([1.0], 0.95) == 1.0
