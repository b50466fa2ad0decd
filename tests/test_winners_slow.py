"""Winners you can trust, with real sweeps: `confirm` re-runs the top configurations over seeds and ranks them
by their 95% intervals; a CPU-hour budget stops starting trials; the finished event reaches a real receiver."""

from __future__ import annotations

import json
import math

import pytest
from conftest import FAST, SweepsEnv, mlflow_client, trial_dirs
from harness import Sweep
from test_notify import Receiver

pytestmark = pytest.mark.slow

TINY = ["+experiment=quickstart", "scheduler=fifo", "trainable.num_workers=1", *FAST, "trainable.params.epochs=2"]


def _index(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def _best(rows: list[dict], metric: str) -> float:
    return max(r[metric] for r in rows if metric in r and math.isfinite(r[metric]))


def test_confirm_reruns_the_top_k_over_seeds_and_ranks_by_the_pessimistic_bound(sweep: Sweep) -> None:
    """A 2-point grid with ``confirm.enabled`` and ``promote.require_confirmed``: the run confirms its top 2 over
    2 seeds and promotes the confirmed winner itself; ``promote --confirmed`` picks the same one. Why its own
    sweep: confirm re-runs its trials at its end, which a shared sweep would change for its other tests."""
    import numpy as np
    from scipy import stats

    env = sweep.env
    receiver = Receiver("ok")
    hook = {"SWEEPS_TEST_HOOK": receiver.url}  # given as ${oc.env:...}: a later `promote` composes it again
    try:
        env.run("run", *TINY, "sweep.max_concurrent_trials=2",
                "search_space.lr={dist: choice, values: [0.003, 0.1]}", "searcher=grid",
                "search_space.hidden_size={dist: choice, values: [32]}",
                "notify.webhook_url=${oc.env:SWEEPS_TEST_HOOK}", "search_space.batch_size={dist: choice, values: [64]}",
                "sweep.num_samples=1", "confirm.enabled=true", "confirm.top_k=2", "confirm.seeds=2",
                "promote.enabled=true", "promote.require_confirmed=true", "promote.model_name=auto-confirmed",
                check=True, timeout=900, extra_env=hook)
        rec = _index(env)
        assert len(rec["confirm_dirs"]) == 1 and len(rec["confirmed"]) == 2
        # the intervals, recomputed independently from each confirm trial's own result.json
        groups: dict[float, list[float]] = {}
        for d in trial_dirs(rec["confirm_dirs"][0]):
            rows = [json.loads(x) for x in (d / "result.json").read_text().splitlines() if x.strip()]
            groups.setdefault(rows[0]["config"]["lr"], []).append(_best(rows, "val/acc"))
        assert sorted(len(v) for v in groups.values()) == [2, 2], "2 configurations x 2 seeds ran"
        for row in rec["confirmed"]:
            values = np.array(groups[row["params"]["lr"]])
            half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
            assert row["mean"] == pytest.approx(values.mean())
            assert (row["low"], row["high"]) == pytest.approx((values.mean() - half, values.mean() + half))
        assert rec["confirmed"][0]["low"] >= rec["confirmed"][1]["low"], "ranked by the pessimistic end"
        c = mlflow_client(env.tracking_uri)
        confirm_runs = c.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.confirm` = 'true'")
        assert len(confirm_runs) == 4 and all(r.data.tags["mlflow.parentRunId"] == rec["parent_run_id"]
                                              for r in confirm_runs)
        assert len({r.data.tags["sweeps.config_digest"] for r in confirm_runs}) == 2
        assert c.get_run(rec["parent_run_id"]).data.tags["confirmed_winner"] == rec["confirmed"][0]["digest"]
        report = (env.root / "reports" / "quickstart" / rec["sweep_id"] / "summary.md").read_text()
        assert "## Confirmed" in report and rec["confirmed"][0]["digest"] in report
        assert (env.root / "reports" / "quickstart" / rec["sweep_id"] / "confirmed_intervals.png").is_file()
        # the run's own promotion (promote.require_confirmed) and `promote --confirmed`: the winner's best re-run,
        # gated on (and recording) its pessimistic bound
        proc = env.run("promote", "latest", "--confirmed", "--model-name", "confirmed-digits", timeout=600,
                       extra_env=hook)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        winner = [r for r in confirm_runs if r.data.tags["sweeps.config_digest"] == rec["confirmed"][0]["digest"]]
        for name in ("auto-confirmed", "confirmed-digits"):
            version = c.get_model_version_by_alias(name, "champion")
            assert version.tags["trial_id"] in {r.data.tags["sweeps.trial_id"] for r in winner}, name
            assert version.tags["confirmed"] == "true", name
            assert float(version.tags["metric_value"]) == pytest.approx(rec["confirmed"][0]["pessimistic"]), name
        events = [b["event"] for _, b in receiver.bodies]
        assert events[0] == "finished" and events[-1] == "promoted", events
    finally:
        receiver.server.shutdown()


def test_a_gpu_hour_budget_counts_what_trials_held_and_binds_the_sweep_across_extend(sweep: Sweep) -> None:
    """One sweep for the resource budget end to end: trial drivers hold a logical GPU (a fake GPU on this CPU
    box), `sweep.budget.gpu_hours` stops starting trials, the hours recorded are the bundles x the time each
    trial held them (compared with its MLflow run's start and end, which Tune's callbacks set), `--dry-run`
    estimates the next sweep's hours from it, `extend` finds the budget spent and starts nothing, and the
    finished event reaches a receiver configured by `notify.on`/`notify.timeout_s`. Why its own sweep: its
    budget must bind (a fake GPU, 5 s epochs), so it runs fewer trials than it asks for."""
    env = sweep.env
    receiver = Receiver("ok")
    hook = {"SWEEPS_TEST_HOOK": receiver.url}  # by reference: `extend` reads it again, nothing stores the URL
    # 2 epochs of >= 5 s each: a trial holds its GPU >= 10 s; of 15 GPU-seconds the first trial (its cost not
    # known yet) takes >= 10, so a second never fits, in the run or in an extension
    budget = 15 / 3600
    gpu = ["cluster.num_gpus=1", "cluster.driver_resources={GPU: 1}", "+trainable.params.epoch_sleep_s=5"]
    try:
        proc = env.run("run", *TINY, *gpu, "sweep.num_samples=8", "sweep.max_concurrent_trials=1",
                       f"sweep.budget.gpu_hours={budget}", "notify.webhook_url=${oc.env:SWEEPS_TEST_HOOK}",
                       "notify.on=[finished]", "notify.timeout_s=3", extra_env=hook, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        rec = _index(env)
        # a 1-worker trial in its own process: the worker's CPU and the driver's (fake) GPU, one bundle
        assert rec["per_trial"] == {"CPU": 1.0, "GPU": 1.0}, rec["per_trial"]
        c = mlflow_client(env.tracking_uri)
        runs = c.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.kind` = 'trial'")
        held_s = [(r.info.end_time - r.info.start_time) / 1000 for r in runs]
        assert all(s >= 10 for s in held_s), ("the premise: a trial holds its GPU >= 10 s", held_s)
        # the budget binds where the ledger says it must: the first trial ran alone (no cost known yet); after it
        # >= 10 of the 15 GPU-s are used and one more trial (>= 10 s, its cost now known) does not fit
        assert rec["stop_reason"] == "resource_budget" and rec["counts"]["total"] == len(held_s) == 1, \
            (rec["counts"], held_s)
        used = rec["hours"]["gpu_used"]
        assert used * 3600 == pytest.approx(sum(held_s), abs=2.0 * len(held_s)), (used * 3600, held_s)
        assert rec["hours"]["cpu_used"] == pytest.approx(used, rel=1e-6)  # 1 CPU and 1 GPU held as long
        assert "GPU-hours used of" in (env.root / "reports" / "quickstart" / rec["sweep_id"] / "summary.md").read_text()
        parent = c.get_run(rec["parent_run_id"]).data.tags
        assert float(parent["hours.gpu_used"]) == pytest.approx(used, abs=1e-4)
        events = [b for _, b in receiver.bodies]
        assert [e["event"] for e in events] == ["finished"] and events[0]["sweep_id"] == rec["sweep_id"]
        assert receiver.url not in json.dumps(rec) and receiver.url not in proc.stdout + proc.stderr, \
            "the webhook URL is a secret"

        dry = env.run("run", *TINY, *gpu, "sweep.num_samples=8", "--dry-run", check=True).stdout
        per = rec["hours"]["cpu_used"] / rec["counts"]["total"]
        assert f"~{per * 8:.3f} CPU-h" in dry and rec["sweep_id"] in dry, dry

        # the budget is the sweep's: an extension finds it spent and starts no trial
        proc = env.run("extend", rec["sweep_id"], "--more-trials", "2", extra_env=hook, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        after = _index(env)
        assert after["counts"] == rec["counts"], ("the sweep's trials, every run of it, as before", after["counts"])
        assert len(c.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.kind` = 'trial'")) == len(runs)
        assert after["hours"]["gpu_used"] == pytest.approx(used, abs=1e-6)
    finally:
        receiver.server.shutdown()
