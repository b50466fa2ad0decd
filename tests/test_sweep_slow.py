"""Real sweeps: 2-worker TorchTrainers on digits under ASHA, Optuna, HyperOpt; failed and NaN trials; the
MLflow run tree in a SQLite store. Slow tier."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import SweepsEnv, mlflow_client, model_files
from harness import Sweep

from sweeps import uris

pytestmark = pytest.mark.slow

FAST = ["cluster.worker_start_timeout_s=60", "report.enabled=true"]


def _record(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def best_epochs(t, metric: str, mode: str) -> set[int]:  # noqa: ANN001
    """The epochs at which a trial reported its best value of ``metric``: where its best checkpoint was saved."""
    values = [h[metric] for h in t.history if math.isfinite(h.get(metric, math.nan))]
    best = max(values) if mode == "max" else min(values)
    return {h["epoch"] for h in t.history if h.get(metric) == best}


def _trials(env: SweepsEnv, rec: dict):  # noqa: ANN202
    from sweeps.reports.results import epochs_of, load_records

    return load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], epochs_of(rec["config"]))


@pytest.fixture(scope="module")
def asha(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepsEnv, dict, str]:
    """The three tests below share it. Why its own sweep: the shipped digits_asha with trials ASHA must stop (a
    tiny lr) and 2-worker trials split into start stages; tests/test_promote.py's quickstart sweeps stop none
    for sure and leave their report off."""
    env = SweepsEnv(tmp_path_factory.mktemp("asha"))
    # The shipped digits_asha (Ray's ASHA defaults: grace 1, reduction 4), shrunk: 2 lrs x 2 repeats; the
    # tiny-lr trials fall behind at the first rung and ASHA stops them.
    proc = env.run("run", "+experiment=digits_asha", "sweep.num_samples=2", "search_space=digits_small",
                   "search_space.lr={dist: grid, values: [0.00001, 0.03]}", "trainable.num_workers=2",
                   "trainable.params.epochs=4", "scheduler.max_t=4", *FAST, check=True)
    yield env, _record(env), proc.stdout
    env.cleanup()


def test_asha_sweep_trains_reports_and_stops_early(asha) -> None:  # noqa: ANN001
    """Shares the module's 2-worker ASHA sweep (fixture ``asha``) with the run-tree and start-stage tests."""
    env, rec, stdout = asha
    trials = _trials(env, rec)
    assert len(trials) == 4
    assert all(t.status == "TERMINATED" for t in trials)
    assert all(t.values("val/acc") for t in trials), "every trial reported metrics"
    assert sum(t.early_stopped for t in trials) >= 1, [(t.params, t.iterations) for t in trials]
    best = max(max(t.values("val/acc")) for t in trials)
    assert best >= 0.9, best
    assert rec["status"] == "finished" and rec["best"]["value"] == pytest.approx(best)
    assert f"sweep {rec['sweep_id']}: finished" in stdout and "best     :" in stdout
    # checkpoints are real: model + optimizer + epoch
    for t in trials:
        assert t.best_checkpoint and Path(t.best_checkpoint, "model.pt").is_file()
        saved = json.loads(Path(t.best_checkpoint, "meta.json").read_text())["epoch"]
        assert saved in best_epochs(t, "val/acc", "max"), (saved, [(h["epoch"], h["val/acc"]) for h in t.history])


def test_asha_run_tree_in_mlflow(asha) -> None:  # noqa: ANN001
    env, rec, _ = asha
    c = mlflow_client(env.tracking_uri)
    exp = c.get_experiment_by_name("digits_asha")
    runs = c.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("sweeps.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == rec["parent_run_id"]]
    assert len(parents) == 1 and parents[0].info.run_id == rec["parent_run_id"]
    assert len(children) == 4
    assert {r.info.status for r in runs} == {"FINISHED"}, "no run may stay RUNNING"
    p = parents[0].data
    for tag in ("sweeps.sweep_id", "searcher", "scheduler", "metric", "mode", "git_commit", "git_dirty",
                "python_version", "ray_version", "torch_version", "best_trial_id", "count.early_stopped"):
        assert tag in p.tags, tag
    assert p.tags["scheduler"] == "asha" and p.tags["count.total"] == "4"
    assert {a.path for a in c.list_artifacts(rec["parent_run_id"])} >= {"config.yaml", "search_space.json"}
    stopped = [r for r in children if r.data.tags["early_stopped"] == "true"]
    assert stopped and len(stopped) < 4
    for r in children:
        assert {"lr", "hidden_size", "batch_size", "epochs"} <= set(r.data.params)
        hist = c.get_metric_history(r.info.run_id, "val/acc")
        assert [m.step for m in sorted(hist, key=lambda m: m.step)] == list(range(1, len(hist) + 1))
        assert "model.pt" in model_files(c, r)
        assert r.data.tags["sweeps.trial_id"] and r.data.tags["retries"] == "0"
    best_child = [r for r in children if r.data.tags.get("sweeps.best") == "true"]
    assert len(best_child) == 1 and best_child[0].data.tags["sweeps.trial_id"] == p.tags["best_trial_id"]


STAGES = ("pg_wait", "trial_actor", "train_controller", "worker_group", "loop_setup", "first_epoch")


def test_every_start_is_split_into_stages_on_its_run_and_in_the_report(asha) -> None:  # noqa: ANN001
    """Each trial's run holds its start's stages (a 2-worker torch loop passes every point), adding up to the
    start's total; the total agrees with Tune's own clock of the start (``time_total_s`` of the first result:
    from Tune's call into the trial actor, once it is up, to the result), which it holds, and whose stages after
    ``fit()`` lie within it (10%); a start that waited for a slot began once one was free; the report's stage
    table has the MLflow runs' figures (read from the results, which hold the same), and the efficiency line
    splits the slot-seconds."""
    import statistics

    env, rec, stdout = asha
    c = mlflow_client(env.tracking_uri)
    children = c.search_runs([rec["mlflow_experiment_id"]], f"tags.mlflow.parentRunId = '{rec['parent_run_id']}'")
    totals = []
    for r in children:
        m = r.data.metrics
        stages = [m[f"startup/{s}_s"] for s in STAGES]
        assert all(v >= 0 for v in stages), m
        assert sum(stages) == pytest.approx(m["startup/total_s"], rel=0.1), m
        first = c.get_metric_history(r.info.run_id, "startup/total_s")
        assert [h.step for h in first] == [1], "logged once, with the start's first result"
        totals.append(m["startup/total_s"])
    queued = 0
    trials = _trials(env, rec)
    stamps = {tid: (rows[0]["timestamp"], rows[-1]["timestamp"]) for tid, rows in Sweep.only(env).rows().items()}
    number = {t.trial_id: int(t.trial_id.rsplit("_", 1)[-1]) for t in trials}  # Tune numbers trials as it makes them
    for t in trials:
        first = t.history[0]
        total, tune_s = first["startup/total_s"], first["time_total_s"]
        assert tune_s <= total + 0.05, ("Tune's clock runs inside the start", first)
        after_fit = sum(first[f"startup/{s}_s"] for s in STAGES[2:])  # the trial's own points, from fit() on
        assert after_fit <= 1.1 * tune_s + 0.1, ("the stages after fit() within 10% of Tune's clock", first)
        # No wait for a slot in the start: when it began (its first result less its total), fewer trials made
        # before it than the sweep has slots were still running (their last result later). A wait in Tune's queue
        # counted as start-up would put its beginning inside the run of the trial whose slot it took. The trials
        # of the first wave wait for no slot. Ordered by the trials' own clocks (``timestamp``: whole seconds,
        # then the result's way to the driver: 5 s of slack), not by how long a start takes on a loaded machine
        # (the trial actor's lease, outside Tune's clock, took 12 s of a 26 s start in CI).
        if number[t.trial_id] < rec["slots"]:
            continue
        queued += 1
        began = stamps[t.trial_id][0] - total
        busy = [o.trial_id for o in trials if number[o.trial_id] < number[t.trial_id]
                and stamps[o.trial_id][1] > began + 5]
        assert len(busy) < rec["slots"], ("a start began only once a slot was free", t.trial_id, began, busy, first)
    assert queued, "a trial started after another ended (the case a queue wait would show in)"
    summary = (env.root / "reports" / "digits_asha" / rec["sweep_id"] / "summary.md").read_text()
    table = summary.split("## Where the trials' seconds went", 1)[1]
    assert "from the trials' results (every start; their MLflow runs hold the same)" in table
    total_row = next(line for line in table.splitlines() if line.startswith("| total |"))
    assert total_row.split("|")[2].strip() == f"{statistics.median(totals):.4g}", (total_row, totals)
    assert "the slot-seconds went to starting " in summary and "(starting " in stdout
    assert "driver peak memory: " in summary


STARTUP = {"optuna": "searcher.sampler.n_startup_trials", "hyperopt": "searcher.n_initial_points"}


def _random_suggestions(searcher: str, overrides: list[str], n: int) -> list[dict]:
    """What the same searcher and seed suggest with no model at all (start-up forever, no results fed back)."""
    from sweeps.execution.tuning.searchers import build_searcher, param_space
    from sweeps.ops.prepare import prepare

    spec = prepare([*overrides, f"{STARTUP[searcher]}=100"])
    algo = build_searcher(spec, 0)
    algo.set_search_properties(spec.sweep.metric, spec.sweep.mode, param_space(spec))
    return [algo.suggest(f"t{i}") for i in range(n)]


def _worker_processes(stage_log: Path) -> list[tuple[str, int, float]]:
    """(trial, pid, process start) of each Train worker's loop start: the stamps every worker writes when
    ``$SWEEPS_STAGE_LOG`` is set (sweeps/execution/train/stages.py)."""
    rows = [json.loads(x) for x in stage_log.read_text().splitlines() if x.strip()]
    return [(r["trial"], r["pid"], r["proc_start"]) for r in rows if r["stage"] == "loop_start"]


@pytest.mark.parametrize("searcher", ["optuna", "hyperopt"])
def test_model_based_searchers_use_their_model_after_the_start_up_trials(searcher: str, sweep: Sweep,
                                                                       tmp_path: Path) -> None:
    """Why its own sweep: the searcher is the subject (model-based suggestions after its start-up trials).

    Also, its trials one at a time: with Optuna, 1-worker trials in their own process (the default), and that
    process is reused for the next trial (issue 51; what a reused process carries over: tests/test_inprocess_slow.py);
    with HyperOpt, the same trials as a worker group of one (``in_process=false``), whose Train worker is a fresh
    process each time: Train's controller and workers never outlive their Train run."""
    env = sweep.env
    in_process = searcher == "optuna"
    overrides = [f"+experiment=digits_{searcher}", "sweep.num_samples=4", "sweep.max_concurrent_trials=1",
                 "trainable.num_workers=1", f"trainable.in_process={'auto' if in_process else 'false'}",
                 "trainable.params.epochs=2", "scheduler=fifo", "report.enabled=false",
                 f"{STARTUP[searcher]}=2", *FAST]
    stage_log = tmp_path / "stages.jsonl"
    env.run("run", *overrides, check=True, extra_env={"SWEEPS_STAGE_LOG": str(stage_log)})
    rec = _record(env)
    # in the order the searcher suggested them: Tune's trial counter in the folder name (searchers' trial ids
    # are random hex, so sorting by id shuffles them)
    trials = sorted(_trials(env, rec), key=lambda t: int(uris.basename(t.path).split("_")[3]))
    assert len(trials) == 4 and all(t.status == "TERMINATED" and t.iterations == 2 for t in trials)
    workers = _worker_processes(stage_log)
    assert sorted(w[0] for w in workers) == sorted(t.trial_id for t in trials), workers
    if in_process:
        assert len({w[1:] for w in workers}) < 4, ("no trial's process was reused for the next", workers)
    else:
        assert len({w[1:] for w in workers}) == 4, ("a Train worker process was reused across trials", workers)
    state = [n for n in uris.listdir(rec["experiment_dirs"][0])  # a storage location: through sweeps.uris
             if n.startswith("searcher-state-") and n.endswith(".pkl")]
    assert state, f"{searcher} state is saved for resume/extend"
    names = sorted(trials[0].params)
    random = [{k: r[k] for k in names} for r in _random_suggestions(searcher, overrides, 4)]
    seen = [{k: t.params[k] for k in names} for t in trials]
    assert seen[:2] == random[:2], "the two start-up trials are the seeded random ones"
    # TPE's first model-based draw can coincide with the random stream's next one (its candidates come from
    # the same seeded generator): the two model-based trials together must not be the random sequence
    assert seen[2:] != random[2:], \
        f"{searcher} suggested the random start-up sequence after its start-up trials: no model used"


SECRET = "s3cr3t-Value-9731"


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_failed_and_nan_trials(sweep: Sweep) -> None:
    """A raising trial ends ERROR (Tune's retries: tests/test_bridge_slow.py); the sweep goes on; NaN never becomes
    best; MLflow says so.

    The same sweep carries secrets from the environment: they never reach MLflow, the index or reports. Why its
    own sweep: its trials raise and go NaN on purpose, which no shared sweep may.
    """
    env = sweep.env
    env.run("run", "+experiment=quickstart", "sweep.num_samples=1", "scheduler=fifo",
            "+trainable.params.api_key=${oc.env:SWEEPS_TEST_SECRET}",
            "+tracking.password=${oc.env:SWEEPS_TEST_SECRET}",
            "+search_space.fault={dist: grid, values: [none, raise, 'nan']}", "+trainable.params.fault_epoch=2",
            "search_space.lr={dist: choice, values: [0.03]}", "trainable.num_workers=1",
            "trainable.params.epochs=3", "failure.max_failures=0", "sweep.max_concurrent_trials=2",
            *FAST, check=True, extra_env={"SWEEPS_TEST_SECRET": SECRET})
    rec = _record(env)
    leaks: list[str] = []
    for root in (env.home / "mlartifacts", env.home / "sweeps", env.root / "reports"):
        leaks += _files_containing(root, SECRET.encode())
    leaks += [str(env.home / "mlflow.db")] if SECRET.encode() in (env.home / "mlflow.db").read_bytes() else []
    assert not leaks, f"secret leaked into {leaks}"
    c0 = mlflow_client(env.tracking_uri)
    some_child = c0.search_runs([rec["mlflow_experiment_id"]], "tags.`sweeps.kind` = 'trial'")[0]
    assert some_child.data.params["api_key"] == "***REDACTED***", "the secret-bearing param was logged"
    trials = {t.params["fault"]: t for t in _trials(env, rec)}
    assert trials["raise"].status == "ERROR" and trials["raise"].num_failures == 1  # retries: test_bridge_slow
    assert trials["none"].status == "TERMINATED" and trials["nan"].status == "TERMINATED"
    assert rec["best"]["trial_id"] == trials["none"].trial_id
    assert any(math.isnan(v) for v in trials["nan"].values("val/acc"))
    c = mlflow_client(env.tracking_uri)
    runs = {r.data.tags.get("sweeps.trial_id"): r for r in c.search_runs(
        [rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")}
    failed = runs[trials["raise"].trial_id]
    assert failed.info.status == "FAILED"
    assert "injected fault" in failed.data.tags["error"]
    assert "error.txt" in {a.path for a in c.list_artifacts(failed.info.run_id)}
    assert runs[trials["none"].trial_id].info.status == "FINISHED"
    parent = c.get_run(rec["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["count.failed"] == "1"
    import csv
    report = env.root / "reports" / "quickstart" / rec["sweep_id"] / "trials.csv"
    rows = {r["trial_id"]: r for r in csv.DictReader(report.open())}
    by_fault = {fault: rows[t.trial_id] for fault, t in trials.items()}
    assert by_fault["none"]["rank"] == "1", "the finite trial is ranked first"
    assert by_fault["raise"]["status"] == "ERROR" and by_fault["raise"]["rank"] == ""
    nan_row = by_fault["nan"]
    assert nan_row["nonfinite"] == "True" and nan_row["final/val/acc"] == "NaN", nan_row
    assert math.isfinite(float(nan_row["best/val/acc"])), "its best is its best finite value"
    assert "NaN" not in by_fault["none"]["final/val/acc"]
