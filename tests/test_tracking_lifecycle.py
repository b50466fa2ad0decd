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

from sweeps import lease
from sweeps.tracking import callback
from sweeps.tracking import client as tracking


def _tracker(uri: str) -> callback._Tracker:
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "life", uri)
    parent = c.create_run(exp, run_name="life", tags={tracking.RUN_TAG_SWEEP: "life", tracking.RUN_TAG_KIND: "sweep"})
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
    run_id = t.runs["a_00000"]
    run = mlflow_client(uri).get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.data.tags[tracking.RUN_TAG_DRIVER] == lease.driver_id()
    assert run.data.params == {"epochs": "2", "lr": "0.01"}
    for epoch in (1, 2):
        trial.last_result = {"val/acc": 0.5 * epoch, "epoch": epoch, "training_iteration": epoch}
        t.on_trial_result(epoch, [trial], trial, dict(trial.last_result))
    t.on_trial_complete(3, [trial], trial)
    run = mlflow_client(uri).get_run(run_id)
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
    assert run.data.tags[tracking.RUN_TAG_DRIVER] == lease.driver_id()


class _LostResponse:
    """A client whose first ``create_run`` reaches the store and then loses its answer (a timed-out POST)."""

    def __init__(self, real: object, duplicate: bool = False) -> None:
        self.real, self.duplicate, self.calls = real, duplicate, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def create_run(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        run = self.real.create_run(*args, **kwargs)  # type: ignore[attr-defined]
        if self.duplicate and self.calls == 1:  # MLflow's client retried the POST: the server holds two
            return self.real.create_run(*args, **kwargs)  # type: ignore[attr-defined]
        if self.calls == 1:
            raise TimeoutError("read timed out")
        return run


def _trial_runs(uri: str, t: callback._Tracker, tid: str) -> list:
    return mlflow_client(uri).search_runs([t.experiment_id], f"tags.`sweeps.trial_id` = '{tid}'")


def test_a_create_run_whose_answer_was_lost_leaves_one_run_per_trial(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = _tracker(uri)
    t._client = _LostResponse(t.client)
    trial = SimpleNamespace(trial_id="d_00000", config={"lr": 0.01}, last_result={}, num_failures=0, path="")
    t.on_trial_start(0, [trial], trial)  # create_run raised: the run exists, the tracker does not know it
    trial.last_result = {"val/acc": 0.5, "epoch": 1, "training_iteration": 1}
    t.on_trial_result(1, [trial], trial, dict(trial.last_result))  # adopts that run instead of a second one
    t.on_trial_complete(2, [trial], trial)
    t.close_open("KILLED")
    (run,) = _trial_runs(uri, t, "d_00000")
    assert run.info.status == "FINISHED" and run.data.metrics["val/acc"] == 0.5


def test_a_retried_create_run_leaves_no_duplicate_running(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = _tracker(uri)
    t._client = _LostResponse(t.client, duplicate=True)
    trial = SimpleNamespace(trial_id="e_00000", config={"lr": 0.01}, last_result={}, num_failures=0, path="")
    t.on_trial_start(0, [trial], trial)
    t.on_trial_complete(1, [trial], trial)
    t.close_open("KILLED")
    runs = _trial_runs(uri, t, "e_00000")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", [(r.info.run_id, r.info.status) for r in runs]


def test_sweep_experiments_open_on_the_runs_table_and_a_users_kind_is_kept(tmp_path: Path) -> None:
    """MLflow 3 opens an experiment without a kind on its GenAI overview; sweeps' own land on the runs table."""
    import shutil

    from conftest import _template_store

    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)

    def kind(exp_id: str) -> str | None:
        return c.get_experiment(exp_id).tags.get(tracking.KIND_TAG)

    created = tracking.get_or_create_experiment(c, "fresh", uri)
    assert kind(created) == tracking.TRAINING_KIND == "custom_model_development"
    older = c.create_experiment("older")  # made by a sweeps without kinds: it holds a sweep's parent run
    c.create_run(older, tags={tracking.RUN_TAG_KIND: "sweep"})
    assert tracking.get_or_create_experiment(c, "older", uri) == older and kind(older) == tracking.TRAINING_KIND
    users = c.create_experiment("users")  # someone else's, with no sweep in it yet: left as it is
    assert tracking.get_or_create_experiment(c, "users", uri) == users and kind(users) is None
    genai = c.create_experiment("genai", tags={tracking.KIND_TAG: "genai_development"})
    c.create_run(genai, tags={tracking.RUN_TAG_KIND: "sweep"})
    tracking.get_or_create_experiment(c, "genai", uri)
    assert kind(genai) == "genai_development", "a kind someone set is never overwritten"


def test_the_sweeps_tracker_writes_off_tunes_loop_from_a_snapshot_and_settles_before_the_end(tmp_path: Path) -> None:
    """The tracker Tune is given (``make_callback``): its hooks queue the writes for one writer thread, with the
    trial as it was then (Tune changes its object later), so no MLflow call is counted as holding Tune's loop;
    the end of the sweep waits for the queue, then every run is final with everything it was sent."""
    import threading

    from sweeps.tracking import writer
    from sweeps.tracking.queued import make_callback

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = tracking.get_or_create_experiment(c, "queued", uri)
    parent = c.create_run(exp, run_name="queued", tags={tracking.RUN_TAG_SWEEP: "q", tracking.RUN_TAG_KIND: "sweep"})
    t = make_callback(uri=uri, experiment_id=exp, parent_run_id=parent.info.run_id, sweep_id="q",
                               metric="val/acc", mode="max", fixed_params={"epochs": 2}, epochs=2)
    t.setup()  # Tune's setup, on the loop: one search for a resumed sweep's runs
    held = t.timer.loop_seconds
    gate = threading.Event()
    t._later(lambda self: gate.wait(30))  # the writer is busy: the hooks below must not wait for it
    trial = SimpleNamespace(trial_id="q1", config={"lr": 0.01}, last_result={}, num_failures=0, path="")
    t.on_trial_start(0, [trial], trial)
    for step, acc in ((1, 0.5), (2, 0.7)):
        trial.last_result = {"val/acc": acc, "training_iteration": step}
        t.on_trial_result(step, [trial], trial, dict(trial.last_result))
    t.on_trial_complete(2, [trial], trial)
    trial.last_result = {"val/acc": 0.0, "training_iteration": 1}  # Tune's object changes after the hook
    assert not c.search_runs([exp], "tags.`sweeps.trial_id` = 'q1'"), "nothing written while the writer is busy"
    assert t.writer.pending == 5 and t.writer.thread.name == writer.THREAD
    gate.set()
    t.on_experiment_end([trial])
    assert t.writer.pending == 0
    (run,) = c.search_runs([exp], "tags.`sweeps.trial_id` = 'q1'")
    assert run.info.status == "FINISHED" and run.data.params["lr"] == "0.01"
    assert [(m.step, m.value) for m in c.get_metric_history(run.info.run_id, "val/acc")] == [(1, 0.5), (2, 0.7)]
    assert run.data.tags["early_stopped"] == "false", "its end as it was when Tune ended it (2 of 2 epochs)"
    assert t.timer.seconds > held and t.timer.loop_seconds == held, "no write held Tune's loop"


def test_writes_queued_past_the_drain_are_dropped_not_raced() -> None:
    """A writer stuck on a store that does not answer: the end waits ``drain_s``, drops what is still queued and
    goes on to close the runs itself, with no write left to race it."""
    import threading

    from sweeps.tracking.writer import Writer

    w = Writer()
    gate, ran = threading.Event(), []
    w.submit(lambda: gate.wait(30))
    for i in range(3):
        w.submit(lambda i=i: ran.append(i))
    assert not w.wait(0.2)
    assert w.abandon() == 3 and w.pending == 1, "the one being carried out finishes on its own"
    gate.set()
    assert w.wait(5) and ran == [], "no dropped write runs after the end took over"
