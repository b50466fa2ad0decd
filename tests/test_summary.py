"""summary.collect on hand-built trial tables: ranking, ties, NaN/inf, failed trials, compute, efficiency."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sweeps.config import stored
from sweeps.reports import importance, summary
from sweeps.reports.results import TrialRecord, read_param_schedules

M = "val/acc"


def trial(
    tid: str,
    values: list[float],
    *,
    status: str = "TERMINATED",
    early: bool = False,
    params: dict[str, Any] | None = None,
    compute_s: float = 1.0,
    data_s: float = 0.25,
    iter_s: float = 5.0,
    extra: list[dict[str, float]] | None = None,
) -> TrialRecord:
    """A trial that reported ``values`` of the metric, one per epoch (1-based), with timing metrics."""
    history = []
    for i, v in enumerate(values, 1):
        row = {
            M: v,
            "epoch": float(i),
            "training_iteration": float(i),
            "time_this_iter_s": iter_s,
            "time_total_s": iter_s * i,
            "time/compute_s": compute_s,
            "time/data_s": data_s,
            "time/data_frac": data_s / (compute_s + data_s) if compute_s + data_s else 0.0,
        }
        row.update((extra or [{}] * len(values))[i - 1])
        history.append(row)
    return TrialRecord(
        trial_id=tid,
        status=status,
        params=params or {"lr": 0.01},
        history=history,
        early_stopped=early,
        error="RuntimeError: boom" if status == "ERROR" else None,
    )


def test_max_and_min_modes_pick_opposite_winners() -> None:
    recs = [trial("a", [0.2, 0.5]), trial("b", [0.9, 0.7]), trial("c", [0.1, 0.3])]
    hi = summary.collect(recs, M, "max")
    lo = summary.collect(recs, M, "min")
    assert hi.best is not None and lo.best is not None
    assert (hi.best.trial_id, hi.best.best) == ("b", 0.9)
    assert (lo.best.trial_id, lo.best.best) == ("c", 0.1)
    assert hi.ranked == ("b", "a", "c")
    assert lo.ranked == ("c", "a", "b")
    assert [r.trial_id for r in hi.leaderboard] == ["b", "a", "c"]
    assert hi.rank_of("a") == 2 and lo.rank_of("a") == 2


def test_top_k_limits_the_leaderboard_not_the_ranking() -> None:
    recs = [trial(str(i), [i / 10]) for i in range(8)]
    s = summary.collect(recs, M, "max", top_k=3)
    assert [r.trial_id for r in s.leaderboard] == ["7", "6", "5"]
    assert len(s.ranked) == 8


TIED = {"late": [0.5, 0.8], "early": [0.8, 0.7], "early2": [0.8, 0.8], "below": [0.7, 0.79]}


ORDERS = [tuple(TIED)[i:] + tuple(TIED)[:i] for i in range(len(TIED))]  # each trial first once


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_ties_go_to_the_earlier_iteration_then_the_earlier_trial(order: tuple[str, ...], mode: str) -> None:
    """The expected ranking is worked out from the inputs by the rule, for several orders of the records."""
    sign = 1 if mode == "max" else -1  # min mode: the same histories, negated
    values = {t: [sign * v for v in TIED[t]] for t in order}
    best = {t: max(v) if mode == "max" else min(v) for t, v in values.items()}
    reached = {t: v.index(best[t]) + 1 for t, v in values.items()}  # the first iteration at its best
    expected = sorted(order, key=lambda t: (-sign * best[t], reached[t], order.index(t)))
    winner = expected[0]
    s = summary.collect([trial(t, values[t]) for t in order], M, mode)
    assert s.best is not None and (s.best.trial_id, s.best.best_step) == (winner, reached[winner])
    assert s.ranked == tuple(expected)
    assert s.ties == tuple(t for t in expected[1:] if best[t] == best[winner])
    assert len(s.ties) == 2, "the table holds a three-way tie"


def test_nan_and_inf_are_never_best() -> None:
    recs = [
        trial("inf", [0.1, math.inf]),  # max mode: +inf would win if it counted
        trial("nan_only", [math.nan, math.nan]),
        trial("diverged", [0.6, math.nan]),
        trial("ok", [0.4, 0.5]),
    ]
    s = summary.collect(recs, M, "max")
    rows = {r.trial_id: r for r in s.rows}
    assert s.best is not None and s.best.trial_id == "diverged" and s.best.best == 0.6
    assert rows["inf"].best == 0.1 and math.isinf(rows["inf"].final)
    assert math.isnan(rows["nan_only"].best) and math.isnan(rows["diverged"].final)
    assert "nan_only" not in s.ranked
    assert {t for t, r in rows.items() if r.nonfinite} == {"inf", "nan_only", "diverged"}
    assert s.counts["nonfinite"] == 3
    low = summary.collect(recs, M, "min")
    assert low.best is not None and low.best.trial_id == "inf" and low.best.best == 0.1  # -inf never appears


def test_only_nan_trials_give_no_best() -> None:
    s = summary.collect([trial("a", [math.nan]), trial("b", [-math.inf])], M, "min")
    assert s.best is None and s.leaderboard == () and s.ranked == ()
    assert s.counts["nonfinite"] == 2


def test_failed_trials_are_listed_never_ranked() -> None:
    recs = [
        trial("bad", [0.99], status="ERROR"),
        trial("good", [0.5]),
        trial("running", [0.4], status="RUNNING"),
    ]
    s = summary.collect(recs, M, "max")
    assert s.best is not None and s.best.trial_id == "good"
    assert "bad" not in s.ranked
    assert [r.trial_id for r in s.failed] == ["bad"]
    assert s.failed[0].error == "RuntimeError: boom" and s.failed[0].best == 0.99
    assert s.counts == {
        "total": 3,
        "completed": 1,
        "early_stopped": 0,
        "failed": 1,
        "unfinished": 1,
        "nonfinite": 0,
        "data_bound": 0,
    }


def test_compute_saved_by_early_stopping() -> None:
    recs = [
        trial("full1", [0.1] * 8),
        trial("full2", [0.1] * 8),
        trial("stop2", [0.1] * 2, early=True, compute_s=2.0, data_s=0.0),
        trial("stop4", [0.1] * 4, early=True, compute_s=1.0, data_s=0.0),
    ]
    s = summary.collect(recs, M, "max", max_epochs=8)
    assert s.epochs_budget == 32 and s.epochs_trained == 22
    assert s.compute_saved_epochs == 6 + 4
    assert s.compute_saved == pytest.approx(10 / 32)
    assert s.compute_saved_s == pytest.approx(6 * 2.0 + 4 * 1.0)  # epochs left x the trial's s/epoch
    assert s.counts["early_stopped"] == 2 and s.counts["completed"] == 2
    assert summary.collect(recs, M, "max").compute_saved is None  # no budget known


def test_efficiency_is_ideal_over_observed() -> None:
    recs = [trial(str(i), [0.1] * 4, compute_s=1.5, data_s=0.5) for i in range(4)]  # 4 x 4 x 2 s = 32 s
    s = summary.collect(recs, M, "max", wall_s=40.0, slots=2)
    assert s.train_s_total == pytest.approx(32.0)
    assert s.t_ideal_s == pytest.approx(16.0)
    assert s.efficiency == pytest.approx(16.0 / 40.0)
    assert s.train_s_from == (summary.TRAINABLE_CLOCK,)
    assert summary.collect(recs, M, "max", wall_s=40.0).efficiency is None


def test_training_time_falls_back_to_tune_iteration_time() -> None:
    rec = trial("a", [0.1, 0.2], compute_s=0.0, data_s=0.0, iter_s=3.0)
    s = summary.collect([rec], M, "max", wall_s=12.0, slots=1)
    assert s.train_s_total == pytest.approx(6.0)
    assert s.efficiency == pytest.approx(0.5)
    assert s.train_s_from == (summary.TUNE_CLOCK,), "the report must say the figure is Tune's clock"
    both = summary.collect([rec, trial("b", [0.1])], M, "max")
    assert both.train_s_from == (summary.TRAINABLE_CLOCK, summary.TUNE_CLOCK)


def held(cfg: dict[str, Any]) -> tuple[float, float]:
    sweep = stored.read(cfg)
    return sweep.cpus_per_trial, sweep.gpus_per_trial


def test_cpu_and_gpu_seconds_from_the_trial_resources() -> None:
    cfg = {
        "trainable": {"num_workers": 2, "resources_per_worker": {"CPU": 1, "GPU": 0.5}, "use_gpu": True},
        "cluster": {"driver_cpus": 1},
    }
    assert held(cfg) == (3.0, 1.0)
    assert held({"trainable": {"num_workers": 4}, "cluster": {"driver_cpus": 0.5}}) == (
        4.5,
        0.0,
    )
    s = summary.collect(
        [trial("a", [0.1, 0.2], iter_s=10.0)], M, "max", cpus_per_trial=3.0, gpus_per_trial=1.0
    )
    assert s.rows[0].wall_s == 20.0
    assert (s.rows[0].cpu_s, s.rows[0].gpu_s) == (60.0, 20.0)
    assert (s.cpu_s_total, s.gpu_s_total) == (60.0, 20.0)


def test_settings_from_config() -> None:
    cfg = {
        "trainable": {"num_workers": 2, "resources_per_worker": {"CPU": 1}, "params": {"epochs": 8}},
        "cluster": {"driver_cpus": 1},
        "report": {"top_k": 3},
    }
    assert summary.settings_of(stored.read(cfg)) == {
        "top_k": 3,
        "max_epochs": 8,
        "cpus_per_trial": 3.0,
        "gpus_per_trial": 0.0,
    }


def test_trials_waiting_on_data_are_flagged() -> None:
    recs = [
        trial("slow", [0.1, 0.2], compute_s=0.3, data_s=0.7),
        trial("fast", [0.1], compute_s=0.9, data_s=0.1),
    ]
    s = summary.collect(recs, M, "max")
    assert s.data_bound == ("slow",)
    assert s.rows[0].data_frac == pytest.approx(0.7)
    assert s.counts["data_bound"] == 1


def test_schedule_from_config_history_keeps_only_changes() -> None:
    cfg_rows = [
        {"config/lr": 0.1, "config/wd": 0.0},
        {"config/lr": 0.1, "config/wd": 0.0},
        {"config/lr": 0.02, "config/wd": 0.0},
        {"config/lr": 0.02, "config/wd": 0.0},
    ]
    s = summary.collect([trial("pbt", [0.1, 0.2, 0.3, 0.4], extra=cfg_rows), trial("asha", [0.1])], M, "max")
    assert s.schedules == {"pbt": {"lr": ((1, 0.1), (3, 0.02))}}


def test_schedule_argument_wins_and_reaches_the_rows() -> None:
    sched = {"a": {"act": ((1, "relu"), (5, "gelu"))}}
    s = summary.collect([trial("a", [0.1]), trial("b", [0.2])], M, "max", schedules=sched)
    assert s.rows[0].schedule == sched["a"] and s.rows[1].schedule == {}
    assert s.schedules == sched


def test_read_param_schedules_from_tune_result_files(tmp_path: Path) -> None:
    d = tmp_path / "trial_a"
    d.mkdir()
    rows = [
        {"training_iteration": i, "config": {"lr": lr, "hidden": 64, "_resume_from": None}}
        for i, lr in enumerate([0.1, 0.1, 0.05, 0.05], 1)
    ]
    (d / "result.json").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"half-written')
    recs = [
        TrialRecord("a", "TERMINATED", {"lr": 0.05}, path=str(d)),
        TrialRecord("b", "ERROR", {}, path=None),
    ]
    assert read_param_schedules(recs) == {"a": {"lr": ((1, 0.1), (3, 0.05))}}


def test_recollect_keeps_settings_and_applies_changes() -> None:
    recs = [trial("a", [0.1] * 2, early=True), trial("b", [0.3] * 4)]
    s = summary.collect(recs, M, "max", top_k=1, max_epochs=4, wall_s=10.0, slots=1)
    r = summary.recollect(s, recs, cpus_per_trial=2.0)
    assert (r.top_k, r.max_epochs, r.wall_s, r.slots) == (1, 4, 10.0, 1)
    assert r.compute_saved == s.compute_saved and r.cpu_s_total == 2.0 * (10.0 + 20.0)


def test_curves_are_kept_for_the_leaderboard() -> None:
    recs = [trial("a", [0.1, math.nan, 0.3]), trial("b", [0.05]), trial("c", [0.01])]
    s = summary.collect(recs, M, "max", top_k=2)
    assert set(s.curves) == {"a", "b"}
    xs, ys = zip(*s.curves["a"], strict=True)
    assert xs == (1, 2, 3) and ys[0] == 0.1 and math.isnan(ys[1])


def test_param_importances_find_the_parameter_that_matters() -> None:
    recs = []
    for i in range(24):
        lr, noise = 10 ** (-4 + 3 * (i % 8) / 7), [16, 32, 64][i % 3]
        recs.append(trial(str(i), [1.0 - abs(math.log10(lr) + 2.5) / 3], params={"lr": lr, "width": noise}))
    s = summary.collect(recs, M, "max")
    space = {
        "lr": {"dist": "loguniform", "low": 1e-4, "high": 1e-1},
        "width": {"dist": "choice", "values": [16, 32, 64]},
    }
    imp, why = importance.param_importances(s, space)
    assert why is None
    assert set(imp) == {"lr", "width"} and imp["lr"] > 0.8
    assert sum(imp.values()) == pytest.approx(1.0)


def _two_params(n: int = 24, shift: float = 0.0) -> summary.Summary:
    recs = []
    for i in range(n):
        lr, width = 10 ** (-4 + 3 * (i % 8) / 7), [16, 32, 64][i % 3]
        recs.append(trial(str(i), [1.0 - abs(math.log10(lr) + 2.5) / 3 + shift],
                          params={"lr": lr, "width": width}))
    return summary.collect(recs, M, "max")


def test_importances_are_kept_for_the_next_report_over_the_same_trials(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A report written again (``sweeps report``) reads the importances back instead of refitting the forest;
    other trials (or other values) compute them afresh."""
    space = {"lr": {"dist": "loguniform", "low": 1e-4, "high": 1e-1},
             "width": {"dist": "choice", "values": [16, 32, 64]}}
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    kept = importance.cache_path("s1")
    assert kept.is_relative_to(tmp_path / "sweeps") and kept.parent.name.startswith("."), \
        "under the sweep index, in a folder no listing of records reads"
    first = importance.cached_importances(_two_params(), space, kept)
    assert first[1] is None and first[0]["lr"] > 0.8 and kept.is_file()
    fits: list[int] = []
    real = importance.param_importances
    monkeypatch.setattr(importance, "param_importances", lambda *a, **k: (fits.append(1), real(*a, **k))[1])
    assert importance.cached_importances(_two_params(), space, kept) == first
    assert fits == []
    importance.cached_importances(_two_params(shift=0.01), space, kept)
    assert fits == [1], "other best values: fitted again"
    importance.cached_importances(_two_params(n=23), space, kept)
    assert fits == [1, 1], "another set of trials: fitted again"


def test_one_varying_parameter_explains_all_the_variance_without_a_forest() -> None:
    recs = [trial(str(i), [0.1 * i], params={"lr": 0.01 * (i + 1)}) for i in range(5)]
    assert importance.param_importances(summary.collect(recs, M, "max"), {}) == ({"lr": 1.0}, None)
    flat = [trial(str(i), [0.5], params={"lr": 0.01 * (i + 1)}) for i in range(5)]
    imp, why = importance.param_importances(summary.collect(flat, M, "max"), {})
    assert imp != {"lr": 1.0}, "a metric that does not vary is explained by nothing"


def test_param_importances_need_three_finished_trials() -> None:
    recs = [
        trial("a", [0.1], params={"lr": 0.1}),
        trial("b", [0.2], params={"lr": 0.2}),
        trial("c", [0.9], status="ERROR", params={"lr": 0.3}),
        trial("d", [math.nan], params={"lr": 0.4}),
    ]
    imp, why = importance.param_importances(summary.collect(recs, M, "max"), {})
    assert imp == {} and why is not None and "at least 3" in why and "got 2" in why


def test_a_trial_stopped_at_its_first_report_is_not_charged_its_start_up() -> None:
    """Tune's clock only: a one-report trial's time is start-up + one epoch; it gets one steady report of the
    sweep's other trials instead (the first report of each start is the start-up's)."""
    def tune_only(tid: str, times: list[float]) -> TrialRecord:
        rows = [{M: 0.1, "training_iteration": float(i), "iterations_since_restore": float(i),
                 "time_this_iter_s": t} for i, t in enumerate(times, 1)]
        return TrialRecord(tid, "TERMINATED", {}, rows)

    recs = [tune_only("long", [12.0, 1.0, 1.2, 1.0]), tune_only("cut", [11.0]), tune_only("cut2", [13.0])]
    s = summary.collect(recs, M, "max", wall_s=30.0, slots=1)
    by_id = {r.trial_id: r for r in s.rows}
    assert by_id["long"].train_s == pytest.approx(3.2 + 1.0)  # steady reports + the first counted as the median
    assert by_id["cut"].train_s == pytest.approx(1.0) and by_id["cut2"].train_s == pytest.approx(1.0)
    alone = summary.collect([tune_only("cut", [11.0])], M, "max")
    assert alone.rows[0].train_s == pytest.approx(11.0), "no steady report anywhere: the upper bound stays"
