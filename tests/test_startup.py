"""A trial start's stages: the arithmetic on the driver, the points on the trial's side, the report's figures.
The real sweep's stages (MLflow runs, the report's table) are checked in tests/test_sweep_slow.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from sweeps.execution.run import startup
from sweeps.execution.train import startup as trial_side
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
    clock.chosen("t1", at=100.5)  # chosen as Tune added it: its start begins
    clock.chosen("t1", at=101.0)  # chosen again while its actor is staged: no new start
    assert clock.began["t1"] == 100.5
    first: dict[str, Any] = {"val/acc": 0.5, trial_side.KEY: dict(POINTS)}
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


def test_a_queued_trials_wait_is_not_its_start() -> None:
    """HyperBand's trials are queued ahead: the start begins when the scheduler chooses the trial, or when Tune
    stages it (its actor up less its placement group's wait), not when it was added."""
    clock = startup.Clock()
    clock.ready("chosen", at=100.0)
    clock.chosen("chosen", at=150.0)
    clock.up("chosen", at=152.0)
    clock.ready("staged", at=100.0)  # staged by Tune, never chosen: its group asked for at 160 - 5
    clock.up("staged", at=160.0)
    clock.ready("late", at=100.0)  # chosen only while its staged actor waited for room
    clock.chosen("late", at=158.0)
    clock.up("late", at=160.0)
    got = {}
    for tid in ("chosen", "staged", "late"):
        result = {trial_side.KEY: {"fit": 161.0, "pg_wait_s": 5.0 if tid != "chosen" else 0.5}}
        clock.on_result(tid, result, at=170.0)
        got[tid] = result
    assert got["chosen"]["startup/pg_wait_s"] == 0.5 and got["chosen"]["startup/trial_actor_s"] == 10.5
    assert got["staged"]["startup/pg_wait_s"] == 5.0 and got["staged"]["startup/trial_actor_s"] == 1.0
    assert got["late"]["startup/pg_wait_s"] == 5.0 and got["late"]["startup/trial_actor_s"] == 1.0
    assert got["staged"][startup.TOTAL] == 15.0 and got["chosen"][startup.TOTAL] == 20.0, "no queue's wait"


def test_the_workers_placement_wait_is_taken_out_of_the_worker_group() -> None:
    got = startup.stages(100.0, 111.0, {**POINTS, "workers_pg_wait_s": 2.5})
    assert got["startup/worker_group_s"] == 1.5 and got["startup/pg_wait_s"] == 3.5  # the trial's 1 + the workers'
    assert sum(v for k, v in got.items() if k != startup.TOTAL) == pytest.approx(got[startup.TOTAL])


def test_a_loop_without_a_forward_pass_splits_its_span_by_the_epoch_it_reported() -> None:
    points = {"fit": 103.0, "controller": 105.0, "loop": 109.0}
    got = startup.stages(100.0, 111.0, points, trained_s=0.5)
    assert got["startup/loop_setup_s"] == 1.5 and got["startup/first_epoch_s"] == 0.5
    clock = startup.Clock()
    clock.ready("t", at=100.0)
    result = {"time/compute_s": 0.3, "time/data_s": 0.2, trial_side.KEY: points}
    clock.on_result("t", result)
    assert result["startup/first_epoch_s"] == pytest.approx(0.5), result


def test_the_clock_forgets_trials_that_are_not_unfinished() -> None:
    """A resumed run adds its finished trials to Tune again; they never start, and are forgotten."""

    class T:
        def __init__(self, trial_id: str, status: str) -> None:
            self.trial_id, self.status = trial_id, status

    clock = startup.Clock()
    for tid in ("done", "err", "waits"):
        clock.ready(tid, at=1.0)
    clock.prune([T("done", "TERMINATED"), T("err", "ERROR"), T("waits", "PENDING")], force=True)
    assert set(clock.began) == {"waits"}


def test_a_later_start_is_flagged_and_the_report_reads_every_start_of_its_run() -> None:
    class T:
        num_failures = 0

    assert not startup.is_restart(T(), {"training_iteration": 1, "iterations_since_restore": 1})
    assert startup.is_restart(T(), {"training_iteration": 5, "iterations_since_restore": 1}), "from a checkpoint"
    retried = T()
    retried.num_failures = 1
    assert startup.is_restart(retried, {"training_iteration": 1, "iterations_since_restore": 1})
    clock = startup.Clock()
    clock.ready("t", at=1.0)
    result = {trial_side.KEY: {"fit": 2.0}}
    clock.on_result("t", result, restart=True)
    assert result[startup.RESTART] == 1.0


def test_the_report_reads_every_start_of_a_run_that_restarted(tmp_path) -> None:  # noqa: ANN001
    from mlflow.entities import Metric

    from sweeps.tracking.client import client

    c = client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = c.create_experiment("e")
    run = c.create_run(exp).info.run_id
    first = [Metric("startup/total_s", 10.0, 1000, 1), Metric("startup/worker_group_s", 4.0, 1000, 1)]
    again = [Metric("startup/total_s", 6.0, 9000, 3), Metric("startup/worker_group_s", 2.0, 9000, 3),
             Metric(startup.RESTART, 1.0, 9000, 3)]
    c.log_batch(run, metrics=first)
    c.log_batch(run, metrics=again)
    latest = c.get_run(run).data.metrics
    starts = report_side.every_start(c, run, {k: v for k, v in latest.items() if k.startswith("startup/")})
    assert [s["startup/total_s"] for s in starts] == [10.0, 6.0]
    assert starts[0]["startup/worker_group_s"] == 4.0 and starts[1]["startup/worker_group_s"] == 2.0


# What the driver keeps per trial: only for its unfinished trials (a sweep of thousands of trials, issue 43)


def test_the_hours_ledger_keeps_sums_for_ended_trials_not_their_figures() -> None:
    from sweeps.execution.run.hours import Ledger

    ledger = Ledger("s")
    for i in range(100):
        tid = f"t{i}"
        ledger.start(tid, 0.0)
        ledger.iterations[tid] = 3
        ledger.stop(tid, 10.0, ended=True)
    ledger.start("live", 0.0)
    assert not ledger.held and not ledger.iterations, "nothing per ended trial but its id"
    assert ledger.trial_s(20.0) == 10.0 and ledger.used_hours(20.0) == (0.0, 0.0)  # no CPUs configured
    ledger.cpus = 1.0
    assert ledger.used_hours(20.0)[0] == pytest.approx((100 * 10.0 + 20.0) / 3600)


def test_the_stall_watch_forgets_ended_trials() -> None:
    from sweeps.execution.run.stall import Watch, watchdog_callback

    watch = Watch("s", {"CPU": 1.0}, None)
    cb = watchdog_callback(watch)

    class T:
        trial_id = "t1"

    cb.on_trial_start(0, [], T())
    cb.on_trial_result(0, [], T(), {})
    assert watch.started and watch.last_report
    cb.on_trial_complete(0, [], T())
    assert not watch.started and not watch.last_report


def test_a_reused_trial_actors_placement_wait_is_counted_once(local_ray) -> None:  # noqa: ANN001
    """The trial actor's group is placed once; Tune reusing the actor for the next trial waited for no room."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = ray.util.placement_group([{"CPU": 1}])
    ray.get(pg.ready())

    @ray.remote(num_cpus=1)
    class Trial:
        def waits(self) -> list[float | None]:
            return [trial_side.pg_wait_s(), trial_side.pg_wait_s()]

    actor = Trial.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote()
    first, again = ray.get(actor.waits.remote())
    ray.util.remove_placement_group(pg)
    assert first is not None and first >= 0 and again == 0.0
    assert trial_side.pg_wait_s() is None, "outside a group"


def test_the_driver_decides_the_loopback_levers_on_a_helper_thread_while_ray_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the embedded Ray the loopback levers' probe (it imports torch and Train's torch backend: ~1.5 s on 2
    cores) runs beside Ray's start-up, which mostly waits on Ray's own processes, not on the driver's thread
    before or after it. (Ray's start stands in here; a real sweep's listeners line: tests/test_loopback_slow.py.)"""
    import threading

    from sweeps.config import build as config_build
    from sweeps.config import compose
    from sweeps.execution.cluster import loopback, raystart
    from sweeps.ops import launch

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(REPO / "conf"))
    spec = config_build.build_spec(compose.compose(["+experiment=quickstart", "trainable.num_workers=1"]))
    decided, seen = threading.Event(), {}

    def probe(*args: Any) -> None:
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        decided.set()

    def start(*args: Any, **kwargs: Any) -> None:
        seen["while_ray_starts"] = decided.wait(10)

    monkeypatch.setattr(loopback, "internals_missing", probe)
    monkeypatch.setattr(raystart, "start", start)
    monkeypatch.setattr(launch, "stop_ray", lambda: None)
    with launch.launched(spec):
        pass
    assert seen == {"thread": True, "while_ray_starts": True}
