"""Each trial's best checkpoint as an MLflow LoggedModel, on a real SQLite MLflow store (fast tier, no mocks).

:mod:`sweeps.tracking.models` directly (made, found, replaced, ranked, paged), and through the tracking callback
driven in Tune's hook order with duck-typed trials and checkpoints in real folders (what a trial's model holds,
how it ends, what a bad or missing checkpoint does to the others, PBT donors, a resumed trial's best, what the
tracker forgets once a trial has ended).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import _template_store

from sweeps.tracking import callback, models
from sweeps.tracking import client as tracking
from sweeps.tracking.bestbook import parse_lineage

SWEEP = "quickstart-20260101-000000-abcd"
NOW = time.time()


def _store(tmp_path: Path) -> tuple[str, Any, str, str]:
    """A fresh SQLite store (copied from the migrated template): (uri, client, experiment id, parent run id)."""
    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "models", uri)
    parent = c.create_run(exp, run_name=SWEEP, tags={tracking.RUN_TAG_SWEEP: SWEEP, tracking.RUN_TAG_KIND: "sweep"})
    return uri, c, exp, parent.info.run_id


def _checkpoint(folder: Path, step: int) -> str:
    ck = folder / f"checkpoint_{step:06d}"
    ck.mkdir(parents=True)
    (ck / "model.pt").write_bytes(f"weights of step {step}".encode())
    return str(ck)


def _result(acc: float, step: int, ts: float = NOW) -> dict[str, Any]:
    return {"val/acc": acc, "train/loss": 1 - acc, "training_iteration": step, "timestamp": int(ts),
            "config": {"lr": 0.1}, "done": False}


# -- sweeps.tracking.models -----------------------------------------------------------------------------------
def test_a_model_holds_the_checkpoint_params_tags_and_its_steps_metrics_linked_to_the_dataset(tmp_path: Path) -> None:
    uri, c, exp, _ = _store(tmp_path)
    run = c.create_run(exp, run_name="t1")
    ck = _checkpoint(tmp_path / "t1", 2)
    made = models.upsert(c, exp, run.info.run_id, SWEEP, "t1", ck, _result(0.8, 2), {"lr": 0.1, "hidden": 64},
                         "early-stopped", donor="t0", dataset=("digits", "abc123"))
    assert made.action == "made"
    m = c.get_logged_model(made.model_id)
    assert m.name == f"{SWEEP}-t1" and m.source_run_id == run.info.run_id and str(m.status) == "READY"
    assert m.params == {"lr": "0.1", "hidden": "64"}
    assert {k: m.tags[k] for k in (models.TAG_SWEEP, models.TAG_TRIAL, models.TAG_KIND, models.TAG_STATUS,
                                   models.TAG_STEP, models.TAG_CKPT, models.TAG_DONOR)} == {
        models.TAG_SWEEP: SWEEP, models.TAG_TRIAL: "t1", models.TAG_KIND: "trial", models.TAG_STATUS: "early-stopped",
        models.TAG_STEP: "2", models.TAG_CKPT: ck, models.TAG_DONOR: "t0"}
    got = {x.key: x for x in m.metrics}
    assert set(got) == {"val/acc", "train/loss"}, "numbers only: no config, step or time"
    assert {x.step for x in got.values()} == {int(m.tags[models.TAG_STEP])}
    assert got["val/acc"].value == 0.8 and got["val/acc"].model_id == m.model_id
    assert (got["val/acc"].dataset_name, got["val/acc"].dataset_digest) == ("digits", "abc123")
    assert [a.path for a in c.list_logged_model_artifacts(m.model_id)] == ["model.pt"]
    assert models.find(c, exp, SWEEP, "t1").model_id == m.model_id
    assert models.find(c, exp, SWEEP, "nobody") is None
    assert models.supported(c, uri)


def test_a_new_best_checkpoint_replaces_the_model_and_its_metrics(tmp_path: Path) -> None:
    """Logged at step 2, then the trial's best moved to step 5: one model, holding step 5's metrics alone."""
    _, c, exp, _ = _store(tmp_path)
    run_id = c.create_run(exp).info.run_id
    first = models.upsert(c, exp, run_id, SWEEP, "t1", _checkpoint(tmp_path, 2), _result(0.6, 2), {}, "unfinished")
    same = models.upsert(c, exp, run_id, SWEEP, "t1", str(tmp_path / "checkpoint_000002"), _result(0.6, 2), {},
                         "unfinished")
    assert same == (first.model_id, "unchanged"), "a second sync writes nothing"
    later = models.upsert(c, exp, run_id, SWEEP, "t1", _checkpoint(tmp_path, 5), _result(0.9, 5), {}, "completed")
    assert later.action == "replaced" and later.model_id != first.model_id
    (only,) = c.search_logged_models([exp])
    assert only.model_id == later.model_id and only.tags[models.TAG_STATUS] == "completed"
    assert sorted((x.key, x.step, x.value) for x in only.metrics) == [("train/loss", 5, pytest.approx(0.1)),
                                                                     ("val/acc", 5, 0.9)]
    status = models.upsert(c, exp, run_id, SWEEP, "t1", str(tmp_path / "checkpoint_000005"), _result(0.9, 5), {},
                           "failed")
    assert status == (later.model_id, "updated")
    assert str(c.get_logged_model(later.model_id).status) == "FAILED", "a failed trial's model is FAILED"


def test_rank_follows_the_report_takes_stale_ranks_off_and_names_the_best_on_the_parent(tmp_path: Path) -> None:
    _, c, exp, parent = _store(tmp_path)
    accs = {"a": 0.7, "b": 0.9, "c": 0.8, "d": 0.1}
    for tid, acc in accs.items():
        models.upsert(c, exp, c.create_run(exp).info.run_id, SWEEP, tid, _checkpoint(tmp_path / tid, 1),
                      _result(acc, 1), {}, "completed")
    report = sorted(accs, key=lambda t: -accs[t])  # b, c, a, d
    best = models.rank(c, exp, SWEEP, report, parent)
    ordered = c.search_logged_models([exp], order_by=[{"field_name": "metrics.val/acc", "ascending": False}])
    assert [m.tags[models.TAG_TRIAL] for m in ordered] == report, "MLflow's order by the metric is the report's"
    assert [m.tags[models.TAG_RANK] for m in ordered] == ["1", "2", "3", "4"]
    assert best == ordered[0].model_id == c.get_run(parent).data.tags["sweeps.best_model_id"]
    models.rank(c, exp, SWEEP, ["c", "b", "a"], parent)  # d no longer ranked (it failed after a resume, say)
    ranks = {m.tags[models.TAG_TRIAL]: m.tags.get(models.TAG_RANK) for m in c.search_logged_models([exp])}
    assert ranks == {"c": "1", "b": "2", "a": "3", "d": None}
    assert c.get_run(parent).data.tags["sweeps.best_model_id"] == models.of_sweep(c, exp, SWEEP)["c"]


def test_of_sweep_reads_every_page_and_leaves_other_kinds_and_sweeps_out(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, c, exp, _ = _store(tmp_path)
    run_id = c.create_run(exp).info.run_id
    for i in range(5):
        c.create_logged_model(exp, source_run_id=run_id, tags={models.TAG_SWEEP: SWEEP, models.TAG_TRIAL: f"t{i}",
                                                               models.TAG_KIND: "trial"})
    c.create_logged_model(exp, tags={models.TAG_SWEEP: SWEEP, models.TAG_TRIAL: "t0", models.TAG_KIND: "served"})
    c.create_logged_model(exp, tags={models.TAG_SWEEP: SWEEP, models.TAG_TRIAL: "x", models.TAG_KIND: "confirm"})
    c.create_logged_model(exp, tags={models.TAG_SWEEP: "another", models.TAG_TRIAL: "t9", models.TAG_KIND: "trial"})
    monkeypatch.setattr(models, "PAGE", 2)  # 3 pages
    found = models.of_sweep(c, exp, SWEEP)
    assert sorted(found) == [f"t{i}" for i in range(5)]
    assert list(models.of_sweep(c, exp, SWEEP, kind="confirm")) == ["x"]


# -- the tracker ----------------------------------------------------------------------------------------------
def _tracker(uri: str, exp: str, parent: str, **kw: Any) -> callback._Tracker:
    return callback._Tracker(uri=uri, experiment_id=exp, parent_run_id=parent, sweep_id=SWEEP, metric="val/acc",
                             mode=kw.pop("mode", "max"), fixed_params={"epochs": 4}, epochs=4,
                             storage_path=str(kw.pop("root", "")), dataset=("digits", "d1"), **kw)


def _trial(root: Path, tid: str, lr: float = 0.1) -> SimpleNamespace:
    path = root / f"train_{tid}"
    path.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(trial_id=tid, config={"lr": lr, "epochs": 4}, last_result={}, num_failures=0,
                           path=str(path), error_file=None, checkpoint=None)


def _report(t: callback._Tracker, trial: SimpleNamespace, acc: float, step: int, checkpoint: bool = True,
            ts: float = NOW) -> str | None:
    """One result (and its checkpoint) as Tune hands them over; the row also goes to result.json, as Tune's own
    logger writes it."""
    import pyarrow.fs as pafs

    result = _result(acc, step, ts)
    ck = _checkpoint(Path(trial.path), step) if checkpoint else None
    row = {**result, "trial_id": trial.trial_id, **({"checkpoint_dir_name": Path(ck).name} if ck else {})}
    with open(Path(trial.path) / "result.json", "a") as f:
        f.write(json.dumps(row) + "\n")
    t.on_trial_result(step, [trial], trial, dict(result))
    trial.last_result = result
    if ck:
        t.on_checkpoint(step, [trial], trial, SimpleNamespace(path=ck, filesystem=pafs.LocalFileSystem()))
    return ck


def _model(c: Any, exp: str, tid: str) -> Any:
    found = c.search_logged_models([exp], filter_string=f"tags.`sweeps.trial_id` = '{tid}'")
    assert len(found) <= 1, f"one model per trial, found {len(found)}"
    return found[0] if found else None


def _run(c: Any, exp: str, tid: str) -> Any:
    (run,) = c.search_runs([exp], f"tags.`sweeps.trial_id` = '{tid}'")
    return run


def test_each_trial_ends_with_its_best_checkpoint_as_a_model_that_says_how_it_ended(tmp_path: Path) -> None:
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    t.setup()
    trials = {tid: _trial(tmp_path, tid) for tid in ("full", "short", "broke", "nockpt", "stopped")}
    for trial in trials.values():
        t.on_trial_start(0, list(trials.values()), trial)
    for step, acc in enumerate([0.5, 0.9, 0.7, 0.8], 1):
        _report(t, trials["full"], acc, step)
    _report(t, trials["short"], 0.4, 1)
    _report(t, trials["broke"], 0.3, 1)
    _report(t, trials["nockpt"], 0.6, 1, checkpoint=False)
    _report(t, trials["stopped"], 0.2, 1)
    t.note_tags("stopped", {"sweeps.stopped_by": "ops@host", "sweeps.stopped_at": "1"})
    for tid in ("full", "short", "nockpt", "stopped"):
        t.on_trial_complete(9, [], trials[tid])
        assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    t.on_trial_error(9, [], trials["broke"])
    assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    t.close_open()

    full = _model(c, exp, "full")
    assert full.tags[models.TAG_STATUS] == "completed" and full.tags[models.TAG_STEP] == "2", "the best, not the last"
    assert full.tags[models.TAG_CKPT].endswith("checkpoint_000002")
    assert {x.key: (x.step, x.value) for x in full.metrics}["val/acc"] == (2, 0.9)
    assert full.params == {"lr": "0.1", "epochs": "4"}
    assert {x.dataset_name for x in full.metrics} == {"digits"}
    run = _run(c, exp, "full")
    assert full.source_run_id == run.info.run_id and run.data.tags["best_model"] == f"models:/{full.model_id}"
    assert run.data.tags["best_checkpoint_iteration"] == full.tags[models.TAG_STEP]
    assert _model(c, exp, "short").tags[models.TAG_STATUS] == "early-stopped"
    assert _model(c, exp, "stopped").tags[models.TAG_STATUS] == "stopped"
    broke = _model(c, exp, "broke")
    assert broke.tags[models.TAG_STATUS] == "failed" and str(broke.status) == "FAILED"
    assert _model(c, exp, "nockpt") is None, "no checkpoint, no model"
    assert {_run(c, exp, tid).info.status for tid in trials} == {"FINISHED", "FAILED"}


def test_a_bad_or_missing_checkpoint_costs_its_own_trial_a_model_and_nothing_else(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint folder with a dangling link (MLflow cannot copy it) and one deleted from storage: each is said
    for its trial and tagged on its run; every run ends at once (no 120 s drain, no KILLED run), and the trial
    that ends after them gets its model."""
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    trials = [_trial(tmp_path, tid) for tid in ("bad", "gone", "good")]
    for trial in trials:
        t.on_trial_start(0, trials, trial)
        ck = _report(t, trial, 0.5, 1)
        assert ck
        if trial.trial_id == "bad":
            (Path(ck) / "dangling").symlink_to(tmp_path / "nowhere")
        if trial.trial_id == "gone":
            shutil.rmtree(ck)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for trial in trials:
            t.on_trial_complete(2, trials, trial)
            assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
        t.close_open()
    assert time.monotonic() - started < 30
    assert not t.finals
    runs = {tid: _run(c, exp, tid) for tid in ("bad", "gone", "good")}
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert "dangling" in runs["bad"].data.tags["sweeps.model_error"]
    assert runs["gone"].data.tags["sweeps.checkpoint_missing"].endswith("checkpoint_000001")
    assert _model(c, exp, "bad") is None and _model(c, exp, "gone") is None, "no half-written model is left"
    assert str(_model(c, exp, "good").status) == "READY"
    said = [r.getMessage() for r in caplog.records]
    assert any("trial bad" in m and "no model" in m for m in said), said
    assert any("trial gone" in m and "not in storage" in m for m in said), said


def test_a_pbt_models_donor_is_the_one_its_scoring_checkpoint_descends_from(tmp_path: Path) -> None:
    """Cloned from a at NOW, then from b at NOW+100: the best checkpoint, reported in between, names a; its run
    holds the whole lineage."""
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    trial = _trial(tmp_path, "r")
    t.on_trial_start(0, [trial], trial)
    _report(t, trial, 0.5, 1, ts=NOW - 50)
    t.book.exploited("r", "a", NOW)  # what note_tags does at the exploit, with the time of day
    _report(t, trial, 0.9, 2, ts=NOW + 50)
    t.book.exploited("r", "b", NOW + 100)
    _report(t, trial, 0.7, 3, ts=NOW + 150)
    t.note_tags("r", {"sweeps.donor": "b"})  # the live path: lineage tagged on the run at once
    t.on_trial_complete(4, [trial], trial)
    assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    model = _model(c, exp, "r")
    assert model.tags[models.TAG_DONOR] == "a" and model.tags[models.TAG_STEP] == "2"
    run = _run(c, exp, "r")
    assert run.data.tags["sweeps.donor"] == "a"
    assert [d for _, d in parse_lineage(run.data.tags["sweeps.lineage"])] == ["a", "b", "b"]


def test_a_resumed_trial_keeps_its_better_checkpoint_from_before_the_stop(tmp_path: Path) -> None:
    """The driver reported 0.9 then 0.5 and died; the resumed sweep's new tracker sees 0.6 next: the model is
    the 0.9 checkpoint, read back from the trial's folder (its result.json rows), with its step's metrics."""
    uri, c, exp, parent = _store(tmp_path)
    first = _tracker(uri, exp, parent, root=tmp_path)
    trial = _trial(tmp_path, "t")
    first.on_trial_start(0, [trial], trial)
    _report(first, trial, 0.9, 1)
    _report(first, trial, 0.5, 2)
    first.note_tags("t", {"sweeps.donor": "d"})  # a PBT exploit before the stop
    first.close_open("KILLED")

    resumed = _tracker(uri, exp, parent, root=tmp_path)
    resumed.setup()
    resumed.on_trial_start(0, [trial], trial)
    _report(resumed, trial, 0.6, 3, ts=time.time() + 5)
    resumed.on_trial_complete(4, [trial], trial)
    assert resumed.uploads.wait(60), "the model uploads (off Tune's loop) end"
    model = _model(c, exp, "t")
    assert model.tags[models.TAG_CKPT].endswith("checkpoint_000001") and model.tags[models.TAG_STEP] == "1"
    assert {x.key: x.value for x in model.metrics}["val/acc"] == 0.9
    assert models.TAG_DONOR not in model.tags, "reported before the exploit: no donor"
    assert _run(c, exp, "t").info.status == "FINISHED"


def test_confirmation_trials_models_say_so_and_stay_out_of_the_ranking(tmp_path: Path) -> None:
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path, confirm=True)
    trial = _trial(tmp_path, "conf")
    t.on_trial_start(0, [trial], trial)
    _report(t, trial, 0.5, 1)
    t.on_trial_complete(2, [trial], trial)
    assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    model = _model(c, exp, "conf")
    assert (model.tags[models.TAG_KIND], model.tags[models.TAG_CONFIRM]) == ("confirm", "true")
    assert models.of_sweep(c, exp, SWEEP) == {} and models.rank(c, exp, SWEEP, ["conf"]) is None


def test_the_tracker_forgets_a_trial_once_its_run_has_ended(tmp_path: Path) -> None:
    """Nothing per trial is left after many trials ended: no run id, buffer, best checkpoint, lineage or noted
    tags (a 10,000-trial sweep's driver keeps the memory of the running ones only)."""
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    trials = [_trial(tmp_path, f"m{i}") for i in range(6)]
    for trial in trials:
        t.on_trial_start(0, trials, trial)
        _report(t, trial, 0.5, 1)
        t.note_tags(trial.trial_id, {"sweeps.donor": "m0", "sweeps.stopped_by": "x"})
    assert len(t.book) == 6 and len(t.runs) == 6
    for trial in trials[:5]:
        t.on_trial_complete(2, trials, trial)
        assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    assert set(t.runs) == {"m5"} and set(t.buffers) <= {"m5"} and set(t.noted) == {"m5"} and len(t.book) == 1
    t.on_trial_error(2, trials, trials[5])
    assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    assert not (t.runs or t.buffers or t.noted or t.finals or len(t.book) or t.params_due or t.created)
    t.close_open()
    assert len(c.search_logged_models([exp])) == 6


class _Counted:
    """A real MLflow client whose calls are counted by method (what a trial costs the store)."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)
        return counted


def test_a_new_trials_run_and_model_cost_the_store_few_calls_and_no_searches(tmp_path: Path) -> None:
    """Thousands of trials: a trial this driver's tracker made the run of gets its model without a search (no
    other writer makes one while the sweep is live; a retry looks again), and a trial's ending without a model is
    one batch (its last metrics with its final tags) and its status."""
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    t.setup()
    t._client = counted = _Counted(tracking.client(uri))
    trial = _trial(tmp_path, "new")
    t.on_trial_start(0, [trial], trial)
    assert counted.calls == {"create_run": 1, "log_batch": 1}, "the run, then its params at once"
    assert _run(c, exp, "new").data.params == {"lr": "0.1", "epochs": "4"}
    _report(t, trial, 0.5, 1)
    t.on_trial_complete(2, [trial], trial)
    assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    assert counted.calls.get("search_logged_models", 0) == 0, counted.calls
    assert _model(c, exp, "new") is not None and _run(c, exp, "new").info.status == "FINISHED"

    plain = _trial(tmp_path, "plain")
    t.on_trial_start(0, [plain], plain)
    t.flush_interval_s = 3600.0  # its metrics wait in the buffer until its end
    _report(t, plain, 0.6, 1, checkpoint=False)
    before = dict(counted.calls)
    t.on_trial_complete(2, [plain], plain)
    spent = {k: v - before.get(k, 0) for k, v in counted.calls.items() if v != before.get(k, 0)}
    assert spent == {"log_batch": 1, "set_terminated": 1}, spent
    run = _run(c, exp, "plain")
    assert run.data.metrics["val/acc"] == 0.6 and run.data.tags["early_stopped"] == "true"
    assert run.info.status == "FINISHED"


def test_a_retried_model_write_looks_for_the_model_an_earlier_attempt_made(tmp_path: Path) -> None:
    uri, c, exp, parent = _store(tmp_path)
    counted = _Counted(c)
    run_id = c.create_run(exp).info.run_id
    ck = _checkpoint(tmp_path / "r", 1)
    first = models.upsert(counted, exp, run_id, SWEEP, "r", ck, _result(0.5, 1), {}, "completed", new=True)
    assert counted.calls.get("search_logged_models", 0) == 0
    again = models.upsert(counted, exp, run_id, SWEEP, "r", ck, _result(0.5, 1), {}, "completed")
    assert counted.calls["search_logged_models"] >= 1 and again == (first.model_id, "unchanged")
    assert len(c.search_logged_models([exp])) == 1


def test_only_the_first_places_carry_a_rank_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep of thousands of trials tags the Models tab's leaderboard, not every model (a write each)."""
    _, c, exp, parent = _store(tmp_path)
    for tid in "abcd":
        models.upsert(c, exp, c.create_run(exp).info.run_id, SWEEP, tid, _checkpoint(tmp_path / tid, 1),
                      _result(0.5, 1), {}, "completed")
    monkeypatch.setattr(models, "RANKED", 2)
    models.rank(c, exp, SWEEP, ["d", "c", "b", "a"], parent)
    ranks = {m.tags[models.TAG_TRIAL]: m.tags.get(models.TAG_RANK) for m in c.search_logged_models([exp])}
    assert ranks == {"d": "1", "c": "2", "b": None, "a": None}


def test_the_checkpoint_keepers_book_holds_what_tunes_retention_may_keep_and_forgets_ended_trials(
        tmp_path: Path) -> None:
    """keeper.KeptBook: the best num_to_keep - 1 (the ranking Tune's retention uses, ties and NaN included), as
    the full book ranks them, and nothing of a trial once it has ended."""
    import math
    import random

    from sweeps.execution.tuning import keeper
    from sweeps.trials import CheckpointBook

    rng = random.Random(7)
    for num_to_keep, mode in ((1, "max"), (2, "min"), (3, "max"), (4, "min")):
        full, kept = CheckpointBook("m", mode), keeper.KeptBook("m", mode, num_to_keep)
        for i in range(60):
            value = rng.choice([math.nan, None, round(rng.random(), 1)])
            ck = SimpleNamespace(path=f"/t/checkpoint_{i:06d}", filesystem=None)
            result = {"m": value, "config": {"big": "x" * 1000}} if value is not None else {"other": 1}
            full.add("t", ck, result)
            kept.add("t", ck, result)
            assert kept.ranked("t") == full.ranked("t")[:num_to_keep - 1], (num_to_keep, mode, i)
        assert len(kept) == num_to_keep - 1
        kept.forget("t")
        assert len(kept) == 0
    _, latest, _ = keeper.callbacks(str(tmp_path / "train"), 3, "m", "max")
    trial = SimpleNamespace(trial_id="t", checkpoint=None, path=str(tmp_path), last_result={"m": 0.5})
    for i in range(5):
        latest.on_checkpoint(i, [trial], trial, SimpleNamespace(path=f"{tmp_path}/checkpoint_{i:06d}", filesystem=None))
    assert len(latest.book) == 2
    latest.on_trial_complete(5, [trial], trial)
    assert len(latest.book) == 0


@pytest.mark.parametrize("mode", ["max", "min"])
def test_only_trials_among_the_best_n_when_they_end_get_a_model(tmp_path: Path, mode: str) -> None:
    """``tracking.max_models``: thousands of trials do not write thousands of models. A trial gets one while it is
    among the best N that got one; the others' runs say why and still name their best checkpoint."""
    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path, max_models=2, mode=mode)
    values = {"a": 0.9, "b": 0.8, "c": 0.1, "d": 0.85} if mode == "max" else {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.15}
    for tid, acc in values.items():
        trial = _trial(tmp_path, tid)
        t.on_trial_start(0, [trial], trial)
        _report(t, trial, acc, 4)
        t.on_trial_complete(5, [trial], trial)
        assert t.uploads.wait(60), "the model uploads (off Tune's loop) end"
    assert {m.tags[models.TAG_TRIAL] for m in c.search_logged_models([exp])} == {"a", "b", "d"}
    skipped = _run(c, exp, "c")
    assert "best 2" in skipped.data.tags["sweeps.model_skipped"] and skipped.data.tags["best_checkpoint"]
    assert skipped.info.status == "FINISHED" and "best_model" not in skipped.data.tags
    assert "sweeps.model_skipped" not in _run(c, exp, "d").data.tags


def test_max_models_is_read_from_the_config_and_a_negative_one_refused(sweeps_env: Any) -> None:
    from sweeps.errors import BadInput
    from sweeps.ops.prepare import prepare

    assert prepare(["+experiment=quickstart"]).tracking.max_models == 100
    assert prepare(["+experiment=quickstart", "tracking.max_models=0"]).tracking.max_models == 0
    with pytest.raises(BadInput) as exc:
        prepare(["+experiment=quickstart", "tracking.max_models=-1"])
    assert "tracking.max_models: must be >= 0" in str(exc.value) and "-1" in str(exc.value)


# -- a scheduler's pauses, promotions and resumes on the trials' runs ------------------------------------------
class _Ctl:
    def __init__(self, trials: list[SimpleNamespace]) -> None:
        self.trials = trials
        self.search_alg = SimpleNamespace(is_finished=lambda: False)

    def get_trials(self) -> list[SimpleNamespace]:
        return self.trials


def _step(t: callback._Tracker, sched: Any, ctl: _Ctl, trial: SimpleNamespace, acc: float, step: int) -> str:
    """One result as Tune hands it over: the callbacks first, then the scheduler's decision."""
    _report(t, trial, acc, step, checkpoint=False)
    said = str(sched.on_trial_result(ctl, trial, trial.last_result))
    trial.status = "PAUSED" if said == "PAUSE" else trial.status
    return said


def _history(c: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in c.get_metric_history(run_id, key)]


def test_a_trials_run_shows_its_pauses_and_promotions_and_a_resumed_tracker_counts_on(tmp_path: Path) -> None:
    """Promotion ASHA behind the sweep's scheduler wrapper: each pause (at its epoch) and promotion (to its rung)
    is a point of the trial's run and counted in its tags, sent with the run's next batch (no call of its own);
    a resumed sweep's tracker counts on from the tags."""
    from sweeps.execution.run import session, wrappers
    from sweeps.execution.tuning.promotion import PromotionASHA

    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    sched = wrappers.sweep_scheduler(PromotionASHA(max_t=27, grace_period=1, reduction_factor=3), name="s-rungs")
    sched.set_search_properties("val/acc", "max")
    session.session("s-rungs").callbacks["given0"] = t
    trials = []
    ctl = _Ctl(trials)
    try:
        for tid, acc in (("a", 0.3), ("b", 0.9), ("c", 0.5)):
            trials.append(SimpleNamespace(**vars(_trial(tmp_path, tid)), status="PENDING"))
            assert sched.choose_trial_to_run(ctl) is trials[-1]
            trials[-1].status = "RUNNING"
            assert _step(t, sched, ctl, trials[-1], acc, 1) == "PAUSE"
        b = trials[1]
        assert sched.choose_trial_to_run(ctl) is b, "the best of rung 1 is promoted"
        b.status = "RUNNING"
        _step(t, sched, ctl, b, 0.91, 2)
        assert _step(t, sched, ctl, b, 0.92, 3) == "PAUSE"
        assert t.flush(force=True)
        run_b, run_a = t.runs["b"], t.runs["a"]
        assert _history(c, run_b, "sweeps/paused_at") == [(1, 1.0), (3, 3.0)]
        assert _history(c, run_b, "sweeps/promoted_to") == [(1, 3.0)], "promoted at epoch 1 to the rung at 3"
        tags = c.get_run(run_b).data.tags
        assert (tags["sweeps.pauses"], tags["sweeps.promotions"]) == ("2", "1")
        tags_a = c.get_run(run_a).data.tags
        assert tags_a["sweeps.pauses"] == "1" and "sweeps.promotions" not in tags_a

        again = _tracker(uri, exp, parent, root=tmp_path)
        again.setup()
        assert again.rungs["b"] == {"sweeps.pauses": 2, "sweeps.promotions": 1}, "a resumed sweep counts on"
        again.note_rung("b", "promotion", 9.0)
        assert again.tags_due["b"] == {"sweeps.promotions": "2"}
    finally:
        session.end("s-rungs")


def test_a_scheduler_of_tunes_own_that_pauses_has_its_pauses_and_resumes_counted(tmp_path: Path) -> None:
    """Any scheduler that pauses (HyperBand, PBT): the wrapper sees the PAUSE it returns and the paused trial it
    chooses to run again."""
    from ray.tune.schedulers import FIFOScheduler

    from sweeps.execution.run import session, wrappers

    class PausesAtTwo(FIFOScheduler):  # a Tune scheduler on the public interface: pause once at epoch 2
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
            return str(self.PAUSE if result["training_iteration"] == 2 else self.CONTINUE)

        def choose_trial_to_run(self, tune_controller: Any) -> Any:
            return next((x for x in tune_controller.get_trials() if x.status in ("PENDING", "PAUSED")), None)

    uri, c, exp, parent = _store(tmp_path)
    t = _tracker(uri, exp, parent, root=tmp_path)
    sched = wrappers.sweep_scheduler(PausesAtTwo(), name="s-pauses")
    session.session("s-pauses").callbacks["given0"] = t
    trial = SimpleNamespace(**vars(_trial(tmp_path, "x")), status="RUNNING")
    ctl = _Ctl([trial])
    try:
        _step(t, sched, ctl, trial, 0.5, 1)
        assert _step(t, sched, ctl, trial, 0.6, 2) == "PAUSE"
        assert sched.choose_trial_to_run(ctl) is trial
        t.flush(force=True)
        run = t.runs["x"]
        assert _history(c, run, "sweeps/paused_at") == [(2, 2.0)]
        assert _history(c, run, "sweeps/resumed_at") == [(2, 2.0)]
        tags = c.get_run(run).data.tags
        assert (tags["sweeps.pauses"], tags["sweeps.resumes"]) == ("1", "1")
    finally:
        session.end("s-pauses")
