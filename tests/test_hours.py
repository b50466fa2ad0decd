"""The hours ledger and the stall watchdog's rules, without Ray: pure state, real pickling. Fast tier.

The ledger counts what a trial held from its start to its end, pause or failure (bundles x those intervals),
carries the hours of the sweep's earlier runs (a budget is the sweep's, across resume and extend), admits
trials only while the running and waiting ones' rest and one more fit, and one at a time while no trial's cost
is known. A restored Tuner unpickles its gated searcher and stopper: they must find this process's ledger.
"""

from __future__ import annotations

import pickle

import pytest

from sweeps.config.spec import BudgetCfg
from sweeps.execution.run import hours
from sweeps.execution.run.stall import Watch


def ledger(cpu_hours: float | None = None, prior: tuple[float, float] = (0.0, 0.0),
           estimate: float | None = None, cpus: float = 3.0, gpus: float = 0.0) -> hours.Ledger:
    return hours.ledger_of("s").configure(BudgetCfg(cpu_hours, None), cpus, gpus, 4, prior, estimate)


def test_a_trial_holds_its_bundle_from_start_to_end_and_a_pause_releases_it() -> None:
    led = ledger()
    led.start("a", 100.0)
    led.stop("a", 130.0, ended=False)  # paused by PBT: holds nothing while paused
    led.start("a", 200.0)
    led.stop("a", 210.0, ended=True)
    led.start("b", 200.0)
    # an ended trial's 40 s move into the sums (a long sweep keeps per-trial figures for unfinished trials only)
    assert led.ended_s == 40.0 and led.ended_n == 1 and "a" not in led.held and led.held_s("b", 260.0) == 60.0
    cpu_h, gpu_h = led.used_hours(260.0)
    assert cpu_h == pytest.approx((40.0 + 60.0) * 3 / 3600) and gpu_h == 0.0


def test_the_hours_of_earlier_runs_count_and_reach_the_record() -> None:
    led = ledger(cpu_hours=1.0, prior=(0.25, 0.5), gpus=1.0)
    led.start("a", 0.0)
    led.stop("a", 360.0, ended=True)
    record = led.record()
    assert record["cpu_used"] == pytest.approx(0.25 + 360 * 3 / 3600)
    assert record["gpu_used"] == pytest.approx(0.5 + 360 / 3600) and record["cpu_budget"] == 1.0


def test_with_no_cost_known_trials_start_one_at_a_time() -> None:
    led = ledger(cpu_hours=10.0)
    assert led.admits_next(), "the first trial"
    led.waiting = 1  # suggested, not started yet
    assert not led.admits_next(), "a second one waits until a cost is known"
    led.waiting = 0
    led.start("a", 0.0)
    assert not led.admits_next()


def test_waiting_and_running_trials_are_counted_before_one_more_is_admitted() -> None:
    # one trial costs 600 s x 3 CPUs = 0.5 CPU-h (the previous sweep's estimate); the budget is 1.2 CPU-h
    led = ledger(cpu_hours=1.2, estimate=600.0)
    assert led.admits_next()  # 0 used + 0.5 for it
    led.waiting = 1
    assert led.admits_next()  # 0.5 committed + 0.5 = 1.0
    led.waiting = 2
    assert not led.admits_next(), "two waiting trials and one more would be 1.5 CPU-h"


def test_a_spent_budget_says_so() -> None:
    led = ledger(cpu_hours=0.01)
    led.start("a", 0.0)
    led.stop("a", 100.0, ended=True)  # 300 CPU-s = 0.083 CPU-h
    assert led.spent() and not led.admits_next()


def test_a_pickled_ledger_is_this_processs_ledger_of_the_same_sweep() -> None:
    led = ledger(cpu_hours=1.0)
    assert pickle.loads(pickle.dumps(led)) is hours.ledger_of("s") is led
    other = hours.ledger_of("other")
    assert other is not led and pickle.loads(pickle.dumps(other)) is other, "two sweeps never share a ledger"


def test_the_watchdog_speaks_after_twice_the_longest_gap_and_ends_after_its_limit() -> None:
    w = Watch("s", {"CPU": 3.0}, timeout_s=None)
    w.progress("a", now=0.0, start=True)
    w.progress("a", now=100.0)  # a 100 s start-up
    assert w.say_after() == 200.0 and w.limit() == 900.0
    w.progress("a", now=400.0)  # a 300 s gap between reports
    assert w.say_after() == 600.0 and w.limit() == 1500.0
    assert Watch("s", {}, timeout_s=0).limit() is None, "0 = never"
    assert Watch("s", {}, timeout_s=42).limit() == 42


def test_an_extension_prices_its_next_trial_from_the_sweeps_own_hours(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """`extend` and `resume` mark the sweep running before its Tuner is built, so the experiment's last
    *finished* sweep is not there to price a trial: the sweep's own record is. One 12 s trial (2 CPUs, 1 GPU)
    already held 12 of 15 GPU-seconds: the next one cannot fit, and is not started."""
    from types import SimpleNamespace

    from sweeps import store
    from sweeps.execution.run.callbacks import trial_seconds

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    assert store.latest_for("quickstart") is None, "no finished sweep of the experiment to go by"
    own = SimpleNamespace(hours={"cpu_used": 24 / 3600, "gpu_used": 12 / 3600}, counts={"total": 1})
    spec = SimpleNamespace(sweep=SimpleNamespace(name="quickstart"))
    plan = SimpleNamespace(per_trial={"CPU": 2.0, "GPU": 1.0})
    one = trial_seconds(spec, plan, own)  # type: ignore[arg-type]
    assert one == pytest.approx(12.0)
    led = hours.ledger_of("s").configure(BudgetCfg(None, 15 / 3600), 2.0, 1.0, 2, (24 / 3600, 12 / 3600), one)
    assert not led.admits_next(), "12 GPU-s held + a 12 s trial > 15"
    assert hours.ledger_of("s").configure(BudgetCfg(None, 30 / 3600), 2.0, 1.0, 2, (24 / 3600, 12 / 3600),
                                            one).admits_next()
