"""``sync``'s models and the report's model ids (fast tier, a real SQLite MLflow store, no mocks).

``sync`` back-fills a trial's model from the trial's record in storage: an interrupted sweep's trial gets status
``unfinished`` (never ``completed``), a second sync writes nothing, a trial whose best checkpoint moved since gets
a new model in place of the old one, and the models are ranked as the report ranks the trials. The report names
each trial's model where it shows the ranking (summary.md, report.html).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import _template_store

from sweeps import store
from sweeps.ops import sync
from sweeps.reports import formats, summary
from sweeps.reports.outline import Analysis
from sweeps.reports.results import TrialRecord
from sweeps.tracking import client as tracking
from sweeps.tracking import models

SWEEP = "demo-20260101-000000-abcd"


def _setup(tmp_path: Path) -> tuple[Any, store.SweepRecord]:
    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "demo", uri)
    parent = c.create_run(exp, run_name=SWEEP).info.run_id
    rec = store.SweepRecord(sweep_id=SWEEP, experiment="demo", created=0.0, status="interrupted",
                            storage_path=str(tmp_path), experiment_dirs=[str(tmp_path / SWEEP)], tracking_uri=uri,
                            config={}, metric="val/acc", mode="max", mlflow_experiment_id=exp, parent_run_id=parent)
    return c, rec


def _trial(tmp_path: Path, tid: str, accs: list[float], status: str = "TERMINATED") -> TrialRecord:
    """A trial folder as Tune leaves it: result.json rows naming checkpoint folders, the best one's still there."""
    folder = tmp_path / SWEEP / f"train_{tid}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"val/acc": a, "training_iteration": i, "timestamp": 1767225600 + i,
             "checkpoint_dir_name": f"checkpoint_{i:06d}"} for i, a in enumerate(accs, 1)]
    (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    best = max(range(len(accs)), key=lambda i: (accs[i], i)) + 1
    (folder / f"checkpoint_{best:06d}").mkdir(exist_ok=True)
    (folder / f"checkpoint_{best:06d}" / "model.pt").write_bytes(b"w")
    return TrialRecord(trial_id=tid, status=status, params={"lr": 0.1},
                       history=[{k: v for k, v in r.items() if k != "checkpoint_dir_name"} for r in rows],
                       path=str(folder), best_checkpoint=str(folder / f"checkpoint_{best:06d}"),
                       best_checkpoint_value=accs[best - 1], best_checkpoint_iteration=best)


def test_sync_marks_an_unfinished_trials_model_writes_nothing_twice_and_replaces_a_moved_best(tmp_path: Path) -> None:
    c, rec = _setup(tmp_path)
    run_id = c.create_run(rec.mlflow_experiment_id).info.run_id
    running = _trial(tmp_path, "t1", [0.5, 0.7], status="RUNNING")  # interrupted: it will train on
    assert sync._model(c, rec, None, run_id, running) == "made"
    (model,) = c.search_logged_models([rec.mlflow_experiment_id])
    assert model.tags[models.TAG_STATUS] == "unfinished" and model.tags[models.TAG_STEP] == "2"
    assert {x.key: (x.step, x.value) for x in model.metrics}["val/acc"] == (2, 0.7)
    assert sync._model(c, rec, None, run_id, running) == "unchanged"
    done = _trial(tmp_path, "t1", [0.5, 0.7, 0.9, 0.8])  # resumed and finished: its best is step 3 now
    assert sync._model(c, rec, None, run_id, done) == "replaced"
    (model,) = c.search_logged_models([rec.mlflow_experiment_id])
    assert model.tags[models.TAG_STATUS] == "completed" and model.tags[models.TAG_STEP] == "3"
    assert sorted((x.key, x.step) for x in model.metrics) == [("val/acc", 3)], "step 3's metrics alone"
    assert sync.model_status(_trial(tmp_path, "t2", [0.1], status="ERROR")) == "failed"
    assert sync.model_status(_trial(tmp_path, "t3", [0.1], status="PAUSED")) == "unfinished"


def test_sync_ranks_the_models_as_the_report_and_names_the_best_on_the_parent(tmp_path: Path) -> None:
    c, rec = _setup(tmp_path)
    trials = [_trial(tmp_path, tid, accs) for tid, accs in (("a", [0.6]), ("b", [0.9, 0.7]), ("c", [0.8]))]
    for t in trials:
        sync._model(c, rec, None, c.create_run(rec.mlflow_experiment_id).info.run_id, t)
    best = sync._rank(c, rec, trials)
    ids = models.of_sweep(c, rec.mlflow_experiment_id, SWEEP)
    assert best == ids["b"] == c.get_run(rec.parent_run_id).data.tags["sweeps.best_model_id"]
    ranks = {m.tags[models.TAG_TRIAL]: m.tags[models.TAG_RANK] for m in c.search_logged_models(
        [rec.mlflow_experiment_id])}
    assert ranks == {"b": "1", "c": "2", "a": "3"}


def test_the_report_names_each_trials_model_where_it_ranks_them(tmp_path: Path) -> None:
    _, rec = _setup(tmp_path)
    trials = [_trial(tmp_path, tid, accs) for tid, accs in (("a", [0.6]), ("b", [0.9]), ("c", [0.8]))]
    summ = summary.collect(trials, "val/acc", "max")
    ids = {"a": "m-aaa", "b": "m-bbb"}  # c's model could not be written
    text = formats.markdown(rec, summ, Analysis(model_ids=ids))
    board = text[text.index("## Leaderboard"):]
    lines = [line for line in board.splitlines() if line.startswith("| ") and "rank" not in line][:3]
    assert [line.split("|")[2:4] for line in lines] == [[" b ", " m-bbb "], [" c ", "  "], [" a ", " m-aaa "]]
    assert "its MLflow model: m-bbb (models:/m-bbb)" in text[text.index("## Best trial"):]
    page = formats.html(rec, summ, [], Analysis(model_ids=ids), [])
    assert "m-bbb" in page and "MLflow model" in page
    assert "MLflow model" not in formats.markdown(rec, summ, Analysis()), "no models: no empty column"


# Each sync process: the real ``sweeps.ops.sync.sync`` over the sweep's record; its trials are the ones this file
# lays out as Tune does (handed over pickled: the folders hold no experiment state for Tune to read). Right after
# it looked for a trial's model (and found none), each waits for the other to have looked too: two `sweeps sync`
# started together, in the worst order. "lock": the SQLite store's lock alone keeps them apart (once the other
# asked for a model of the sweep, it waits on the lock: after 2 s the first goes on); "checks": no lock, as two
# machines writing to one server, and the checks after create alone settle which model stands.
RACER = """
import contextlib, logging, pathlib, pickle, sys, time
from sweeps.ops import sync
from sweeps.tracking import models

trials = pickle.loads(pathlib.Path(sys.argv[1]).read_bytes())
meeting, (name, sweep_id, mode) = pathlib.Path(sys.argv[2]), sys.argv[3:6]
sync.load_records = lambda *a, **k: trials
if mode == "lock":
    models._yield = lambda *a, **k: None
else:
    models._writing = lambda *a, **k: contextlib.nullcontext()
looked, find, upsert = set(), models.find, models.upsert

def wait(pattern, n, seconds):
    deadline = time.monotonic() + seconds
    while len(list(meeting.glob(pattern))) < n and time.monotonic() < deadline:
        time.sleep(0.01)

def asking(client, experiment_id, run_id, sweep_id, trial_id, *args, **kwargs):
    (meeting / "asked" / f"{trial_id}.{name}").touch()
    return upsert(client, experiment_id, run_id, sweep_id, trial_id, *args, **kwargs)

def find_then_meet(client, experiment_id, sweep_id, trial_id):
    found = find(client, experiment_id, sweep_id, trial_id)
    if trial_id not in looked:
        looked.add(trial_id)
        (meeting / f"{trial_id}.{name}").touch()
        if mode == "lock":  # the other asked for a model of the sweep: it holds the lock, or waits on it
            wait(f"asked/*.{'two' if name == 'one' else 'one'}", 1, 60)
        wait(f"{trial_id}.*", 2, 60 if mode == "checks" else 2)
    return found

models.find, models.upsert = find_then_meet, asking
logging.basicConfig(level=logging.WARNING, format=name + " %(name)s %(levelname)s %(message)s")
logging.getLogger("sweeps.tracking.models").setLevel(logging.DEBUG)
print(sync.sync(sweep_id))
"""


def _race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, trial_ids: str) -> list[str]:
    """Two ``sync`` processes at once (``mode``) over a sweep of ``trial_ids`` on one SQLite store; each trial
    ends with one model, READY, with its metrics. Returns who looked for which trial's model (``a.one``...)."""
    import pickle
    import subprocess
    import sys

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    c, rec = _setup(tmp_path)
    trials = [_trial(tmp_path, tid, [0.5 + i / 10, 0.4]) for i, tid in enumerate(trial_ids)]
    for t in trials:  # the sweep's trial runs, as its tracker left them
        run = c.create_run(rec.mlflow_experiment_id, run_name=f"run_trial_{t.trial_id}", tags={
            tracking.PARENT_TAG: rec.parent_run_id, tracking.RUN_TAG_SWEEP: SWEEP, tracking.RUN_TAG_TRIAL: t.trial_id,
            tracking.RUN_TAG_KIND: "trial"})
        c.set_terminated(run.info.run_id, "FINISHED")
    store.save(rec)
    (tmp_path / "trials.pkl").write_bytes(pickle.dumps(trials))
    meeting = tmp_path / "meeting"
    (meeting / "asked").mkdir(parents=True)
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path / "trials.pkl"), str(meeting), name, SWEEP,
                               mode], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name in ("one", "two")]
    outs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    found = models.models_of(c, rec.mlflow_experiment_id, SWEEP)
    assert sorted(m.tags[models.TAG_TRIAL] for m in found) == sorted(trial_ids), (
        [(m.tags[models.TAG_TRIAL], m.model_id, str(m.status), m.creation_timestamp) for m in found], "\n".join(outs))
    assert all(str(m.status) == "READY" and m.metrics for m in found), [(m.model_id, m.status) for m in found]
    return sorted(f.name for f in meeting.iterdir() if f.is_file())


def test_two_syncs_on_one_machine_leave_one_model_per_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a SQLite store the second ``sync`` waits for the first one's model (the store's lock), then finds it:
    each trial ends with one model, READY, with its metrics."""
    _race(tmp_path, monkeypatch, "lock", "ab")


def test_two_syncs_on_two_machines_leave_one_model_per_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Without a lock in common (two machines, one server), each ``sync`` past its look before either made a
    model: the checks after create leave one model per trial (MLflow has no unique key on models)."""
    met = _race(tmp_path, monkeypatch, "checks", "abc")
    assert met == [f"{t}.{n}" for t in "abc" for n in ("one", "two")], "both looked before either made a model"
