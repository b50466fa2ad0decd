"""The tracking callback's run life cycle on a real SQLite MLflow store (fast tier).

Drives :class:`sweeps.tracking.callback._Tracker` through Tune's hook order with a duck-typed trial (the attributes
the hooks read), and checks what MLflow holds after each step: a new trial's run is RUNNING with this driver's
tag from ``create_run`` alone; a restored sweep (the callback unpickled from ``tuner.pkl`` by a new driver)
reopens the runs a dead driver left KILLED; a finished trial ends FINISHED with its metrics.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

from conftest import mlflow_client

from sweeps.tracking import callback
from sweeps.tracking import client as tracking


def _tracker(uri: str) -> callback._Tracker:
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "life", uri)
    parent = c.create_run(exp, run_name="life", tags={tracking.TAG_SWEEP: "life", tracking.TAG_KIND: "sweep"})
    return callback._Tracker(uri=uri, experiment_id=exp, parent_run_id=parent.info.run_id, sweep_id="life",
                             metric="val/acc", mode="max", fixed_params={"epochs": 2}, epochs=2)


def _started(tmp_path: Path, tid: str) -> tuple[str, callback._Tracker, SimpleNamespace]:
    """A tracker on a fresh SQLite store that has seen one trial start: (uri, tracker, trial)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = _tracker(uri)
    t.setup()
    trial = SimpleNamespace(trial_id=tid, config={"lr": 0.01}, last_result={}, num_failures=0, path="")
    t.on_trial_start(0, [trial], trial)
    return uri, t, trial


def test_new_run_is_running_with_driver_tag_then_finished(tmp_path: Path) -> None:
    uri, t, trial = _started(tmp_path, "a_00000")
    run = mlflow_client(uri).get_run(t.runs["a_00000"])
    assert run.info.status == "RUNNING"
    assert run.data.tags[tracking.TAG_DRIVER] == tracking.driver_id()
    assert run.data.params == {"epochs": "2", "lr": "0.01"}
    for epoch in (1, 2):
        trial.last_result = {"val/acc": 0.5 * epoch, "epoch": epoch, "training_iteration": epoch}
        t.on_trial_result(epoch, [trial], trial, dict(trial.last_result))
    t.on_trial_complete(3, [trial], trial)
    run = mlflow_client(uri).get_run(t.runs["a_00000"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["val/acc"] == 1.0
    assert run.data.tags["early_stopped"] == "false"


def test_restored_tracker_reopens_runs_a_dead_driver_left_killed(tmp_path: Path) -> None:
    uri, first, trial = _started(tmp_path, "b_00000")
    run_id = first.runs["b_00000"]
    first.close_open("KILLED")  # what the dying driver's cleanup (or close_stale_runs) leaves behind
    assert mlflow_client(uri).get_run(run_id).info.status == "KILLED"

    restored = pickle.loads(pickle.dumps(first))  # Tune restores callbacks from tuner.pkl
    restored.setup()
    restored.on_trial_start(0, [trial], trial)
    run = mlflow_client(uri).get_run(run_id)
    assert restored.runs["b_00000"] == run_id  # the same run, not a duplicate
    assert run.info.status == "RUNNING"
    assert run.data.tags[tracking.TAG_DRIVER] == tracking.driver_id()
