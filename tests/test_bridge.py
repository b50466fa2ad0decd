"""The Train -> Tune bridge's parts without a Train run: the channel and its ack, checkpoint copies, PBT pins
and the clean-up, and the Ray behaviour the design leans on (Tune's call order, seen in a tiny real Tune run on
a small local Ray), pinned here, so a Ray upgrade that changes it fails a fast test instead of a sweep."""

from __future__ import annotations

import inspect
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.fs as pafs
import pytest

from sweeps.execution.train import bridge, pins, startup
from sweeps.execution.tuning import keeper
from sweeps.trials import CheckpointBook


def _controller_side(channel: bridge.Channel, token: bytes | None = None):  # noqa: ANN202
    return bridge.bridge_callback(channel.address, token or channel.token, driver_node=None)  # no Ray here


def _first(item: tuple | None, controller_up: float | None = None) -> tuple:
    """A connection's first report, its start-up point taken out: it says when the controller came up (the
    callback's unpickling in the controller's actor, ``controller_up``, when it was unpickled)."""
    assert item is not None
    metrics, ckpt = item
    points = metrics.pop(startup.KEY)
    assert isinstance(points["controller"], float)
    assert controller_up is None or points["controller"] == controller_up
    return metrics, ckpt


def test_report_waits_for_the_drivers_ack_and_the_seed_report_is_dropped() -> None:
    channel = bridge.Channel()
    cb = _controller_side(channel)
    done = threading.Event()

    def controller() -> None:
        cb.after_report(None, [{bridge.SEED_KEY: 1}], "seed")  # dropped: nothing is sent
        cb.after_report(None, [{"epoch": 1}], "ckpt-1")
        done.set()

    t = threading.Thread(target=controller)
    t.start()
    try:
        assert _first(channel.receive(timeout=30)) == ({"epoch": 1}, "ckpt-1")
        assert not done.wait(timeout=0.5), "the controller went on before Tune had taken the report"
        assert t.is_alive()
        channel.ack()
        assert done.wait(timeout=10), "the ack released the controller"
        t.join(timeout=10)
        assert channel.receive(timeout=0.2) is None
    finally:
        channel.close()


def test_a_closed_channel_ends_the_train_run_and_a_wrong_token_is_refused() -> None:
    channel = bridge.Channel()
    intruder = _controller_side(channel, token=b"x" * 16)
    errors: list[BaseException] = []

    def send(cb) -> None:  # noqa: ANN001
        try:
            cb.after_report(None, [{"epoch": 1}], None)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=send, args=(intruder,))
    t.start()
    assert channel.receive(timeout=2) is None  # the intruder's connection was dropped unheard
    t.join(timeout=10)
    assert errors, "a peer without the token must not be served"
    good = _controller_side(channel)
    t = threading.Thread(target=send, args=(good,))
    t.start()
    assert channel.receive(timeout=30) is not None
    channel.close()  # the driver goes away (Tune stopped the trial) before acking
    t.join(timeout=10)
    assert len(errors) == 2 and isinstance(errors[1], (EOFError, OSError, TimeoutError)), errors


def _report(cb, metrics: dict[str, int], checkpoint: str) -> threading.Thread:  # noqa: ANN001
    t = threading.Thread(target=cb.after_report, args=(None, [metrics], checkpoint))
    t.start()
    return t


def test_the_callback_pickles_without_its_socket() -> None:
    """Ray pickles the callback into each Train controller it starts: a copy of one that has reported (its
    socket open) carries the channel's address and token, not the socket, and reports on its own."""
    import cloudpickle

    channel = bridge.Channel()
    try:
        cb = _controller_side(channel)
        t = _report(cb, {"epoch": 1}, "ckpt-1")
        assert _first(channel.receive(timeout=30)) == ({"epoch": 1}, "ckpt-1")
        channel.ack()
        t.join(timeout=10)
        assert not t.is_alive() and cb._sock is not None, "the first report opened the socket"
        clone = cloudpickle.loads(cloudpickle.dumps(cb))
        assert clone._sock is None and clone.address == channel.address
        cb._sock.close()  # the first controller ends: its connection closes
        assert channel.receive(timeout=10) is None
        t = _report(clone, {"epoch": 2}, "ckpt-2")
        second = channel.receive(timeout=30)
        assert _first(second, clone.up) == ({"epoch": 2}, "ckpt-2"), "the copy connects and proves itself"
        channel.ack()
        t.join(timeout=10)
        assert not t.is_alive(), "the copy got its ack"
    finally:
        channel.close()


def test_local_checkpoint_copies_are_hard_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "state.pt").write_bytes(b"weights")
    (src / "sub" / "meta.json").write_text("{}")
    fs = pafs.LocalFileSystem()
    bridge.copy_checkpoint(str(src), fs, str(tmp_path / "dst"), fs)
    assert (tmp_path / "dst" / "state.pt").read_bytes() == b"weights"
    assert os.stat(src / "state.pt").st_ino == os.stat(tmp_path / "dst" / "state.pt").st_ino
    assert (tmp_path / "dst" / "sub" / "meta.json").is_file()


def _trial(tmp_path: Path, name: str, ckpt: Path | None) -> SimpleNamespace:
    fs = pafs.LocalFileSystem()
    path = tmp_path / "exp" / name
    path.mkdir(parents=True, exist_ok=True)
    checkpoint = SimpleNamespace(path=str(ckpt), filesystem=fs) if ckpt else None
    return SimpleNamespace(trial_id=name, path=str(path), checkpoint=checkpoint, status="PAUSED", last_result={})


FS = pafs.LocalFileSystem()


def test_a_donor_checkpoint_is_pinned_and_seeds_the_recipient(tmp_path: Path) -> None:
    donor_ckpt = tmp_path / "exp" / "donor" / "checkpoint_000003"
    donor_ckpt.mkdir(parents=True)
    (donor_ckpt / "state.pt").write_bytes(b"donor")
    recipient = _trial(tmp_path, "recipient", donor_ckpt)
    own = _trial(tmp_path, "donor", donor_ckpt)  # its own checkpoint: nothing to pin
    keeper._pin(recipient, FS)
    keeper._pin(own, FS)
    pin = Path(recipient.path) / pins.pin_name(str(donor_ckpt))
    assert (pin / "state.pt").read_bytes() == b"donor"
    assert not list(Path(own.path).glob(f"{pins.PIN_PREFIX}*"))
    import shutil

    shutil.rmtree(donor_ckpt)  # the donor's num_to_keep deleted it: the recipient still has its copy
    (Path(recipient.path) / f"{pins.PIN_PREFIX}stale").mkdir()
    seed = pins.seed_for(recipient.checkpoint, recipient.path)
    assert seed.path == str(pin)
    assert not (Path(recipient.path) / f"{pins.PIN_PREFIX}stale").exists(), "stale pins are dropped"


def test_the_experiment_end_sweep_keeps_only_needed_pins(tmp_path: Path) -> None:
    train_dir = tmp_path / "sweep-train"
    (train_dir / "t1-abc123" / "checkpoint_x").mkdir(parents=True)
    foreign = tmp_path / "exp" / "other" / "checkpoint_000001"
    foreign.mkdir(parents=True)
    waiting = _trial(tmp_path, "waiting", foreign)  # paused, will restore from a donor: keep its pin
    done = _trial(tmp_path, "done", Path(tmp_path / "exp" / "done" / "checkpoint_000004"))
    ended = _trial(tmp_path, "ended", foreign)  # PBT exploited into it as it finished: restores nothing
    ended.status = "TERMINATED"
    keep = Path(waiting.path) / pins.pin_name(str(foreign))
    keep.mkdir()
    (Path(done.path) / f"{pins.PIN_PREFIX}old").mkdir()
    (Path(ended.path) / pins.pin_name(str(foreign))).mkdir()
    keeper._sweep([waiting, done, ended], str(train_dir), FS)
    assert not train_dir.exists()
    assert keep.is_dir()
    assert not list(Path(done.path).glob(f"{pins.PIN_PREFIX}*"))
    assert not list(Path(ended.path).glob(f"{pins.PIN_PREFIX}*"))


def test_a_train_folder_written_after_the_experiment_end_goes_once_ray_has_stopped(tmp_path: Path) -> None:
    """A Train worker killed with its trial can still write after the experiment-end clean-up (CI saw one)."""
    from sweeps.ops.launch import stop_ray

    train_dir = tmp_path / "sweep-train"
    (train_dir / "t1-abc123").mkdir(parents=True)
    keeper._sweep([], str(train_dir), FS)
    assert not train_dir.exists()
    (train_dir / "t1-abc123" / "checkpoint_000003").mkdir(parents=True)  # the dying worker's last write
    stop_ray()  # no Ray here: what a sweep's launch does as it ends
    assert not train_dir.exists()


def _register(tmp_path: Path, trial: SimpleNamespace, index: int, acc: float, num_to_keep: int,
              book: Any) -> None:
    """What Tune does with a trial's new checkpoint: our callback first (it decides, then notes the checkpoint
    in its book), then Tune's own manager registers it."""
    from ray.train._internal.session import _TrainingResult
    from ray.tune import Checkpoint

    path = Path(trial.path) / f"checkpoint_{index:06d}"
    path.mkdir()
    (path / "state.pt").write_bytes(f"epoch {index}".encode())
    keeper.keep_latest(trial, str(path), num_to_keep, book, FS)
    ckpt = Checkpoint(str(path), pafs.LocalFileSystem())
    trial.last_result = {"val/acc": acc, "training_iteration": index + 1}
    book.add(trial.trial_id, ckpt, trial.last_result)
    trial.run_metadata.checkpoint_manager.register_checkpoint(_TrainingResult(ckpt, {"val/acc": acc}))
    trial.checkpoint = ckpt


def test_the_latest_checkpoint_tune_deletes_is_kept_and_resume_puts_it_back(tmp_path: Path) -> None:
    """Tune's real checkpoint manager (num_to_keep=2, mode=min, a rising accuracy): each new checkpoint ranks
    last, so registering it deletes the previous latest, which a not-yet-synced experiment state still names."""
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.tune import CheckpointConfig

    trial = _trial(tmp_path, "t", None)
    config = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="val/acc", checkpoint_score_order="min")
    trial.run_metadata = SimpleNamespace(checkpoint_manager=_CheckpointManager(config))
    book = CheckpointBook("val/acc", "min")  # sweeps' own ranking (public): the decision above rests on it
    folder = Path(trial.path)
    for i in range(3):
        _register(tmp_path, trial, i, 0.5 + i / 10, num_to_keep=2, book=book)
    assert not (folder / f"{keeper.KEEP_PREFIX}checkpoint_000000").exists(), "the best one: Tune keeps it"
    _register(tmp_path, trial, 3, 0.8, num_to_keep=2, book=book)
    assert not (folder / "checkpoint_000002").exists(), "Tune deleted the latest it had before"
    assert (folder / f"{keeper.KEEP_PREFIX}checkpoint_000002" / "state.pt").read_bytes() == b"epoch 2"
    for i in range(4, 9):
        _register(tmp_path, trial, i, 0.5 + i / 10, num_to_keep=2, book=book)
    tune_best = trial.run_metadata.checkpoint_manager.best_checkpoint_result.checkpoint.path
    assert book.best("t")[0] == tune_best, "sweeps' ranking names Tune's best"
    kept = sorted(p.name for p in folder.glob(f"{keeper.KEEP_PREFIX}*"))
    assert kept == [f"{keeper.KEEP_PREFIX}checkpoint_00000{i}" for i in (4, 5, 6, 7)], "num_to_keep + 2 copies"
    assert keeper.restore_kept(str(tmp_path / "exp")) == 4
    assert (folder / "checkpoint_000007" / "state.pt").read_bytes() == b"epoch 7"
    assert keeper.restore_kept(str(tmp_path / "exp")) == 0, "only what is missing is put back"
    trial.status = "TERMINATED"
    keeper._sweep([trial], str(tmp_path / "sweep-train"), FS)
    assert not list(folder.glob(f"{keeper.KEEP_PREFIX}*")), "a finished trial restores from nothing"


@pytest.mark.parametrize("mode", ["min", "max"])
def test_the_best_checkpoint_is_the_one_tunes_retention_ranks_first(tmp_path: Path, mode: str) -> None:
    """The tracker and the reports name a trial's best checkpoint with sweeps' own ranking (public surfaces
    only); Tune's retention keeps the one it ranks best. Ties and NaN, against Tune's real checkpoint manager:
    the same checkpoint. (A report without the metric never gets this far: the metric check ends the sweep.)"""
    import math

    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult
    from ray.tune import Checkpoint, CheckpointConfig

    manager = _CheckpointManager(CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="m",
                                                  checkpoint_score_order=mode))
    book = CheckpointBook("m", mode)
    for i, value in enumerate([0.5, math.nan, 0.7, 0.7, 0.2, 0.5, 0.2]):
        path = tmp_path / f"checkpoint_{i:06d}"
        path.mkdir()
        ckpt = Checkpoint(str(path), FS)
        metrics = {"m": value}
        book.add("t", ckpt, metrics)
        manager.register_checkpoint(_TrainingResult(ckpt, metrics))
        assert book.best("t")[0] == manager.best_checkpoint_result.checkpoint.path, (i, value)
    assert [r.checkpoint.path for r in manager.best_checkpoint_results][-1] == book.ranked("t")[0]


# ---- the Ray internals the bridge relies on -----------------------------------------------------------------

def test_a_controller_on_another_node_than_its_driver_refuses_to_bridge(local_ray: Path) -> None:
    """The bridge's Unix socket needs the controller on the trial driver's node (Train V2 pins it there; the
    cluster tests run real controllers through this check on a worker node). Here the callback was built on a
    node that is not this one: its first report fails, naming both nodes, and no socket is opened."""
    import ray

    channel = bridge.Channel()
    try:
        bridge._check_node(ray.get_runtime_context().get_node_id())  # the same node passes
        elsewhere = bridge.bridge_callback(channel.address, channel.token, driver_node="ab" * 28)
        with pytest.raises(RuntimeError, match=f"not on its trial driver's node {'ab' * 28}"):
            elsewhere.after_report(None, [{"val/loss": 1.0}], None)
        assert elsewhere._sock is None
    finally:
        channel.close()


def test_seeding_uses_public_train_api() -> None:
    import ray.train
    from ray.train.collective import barrier

    assert "checkpoint_upload_fn" in inspect.signature(ray.train.report).parameters
    assert callable(barrier)


@pytest.fixture(scope="module")
def tune_order(local_ray: Path) -> dict[str, list[Any]]:
    """One tiny real Tune run (a function trainable reporting 4 checkpoints, ``num_to_keep=1``) and what a
    recording scheduler and callback saw, in the order Tune called them."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    seen: dict[str, list[Any]] = {"decided": [], "after_decision": [], "latest_on_disk": [], "left": []}

    class Recording(FIFOScheduler):  # type: ignore[misc]
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
            seen["decided"].append((trial.trial_id, result["training_iteration"]))
            decision: str = super().on_trial_result(tune_controller, trial, result)
            return decision

    class Order(tune.Callback):  # type: ignore[misc]
        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            seen["after_decision"].append((trial.trial_id, result["training_iteration"]) in seen["decided"])

        def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
            latest = trial.checkpoint  # what the keeper copies: the latest before this one is registered
            if latest is not None:
                seen["latest_on_disk"].append(latest.path != checkpoint.path and os.path.isdir(latest.path))

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            seen["left"] += sorted(p.name for p in Path(trial.path).glob("checkpoint_*"))

    def reports(config: dict[str, Any]) -> None:
        import tempfile

        from ray import tune

        for step in range(1, 5):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "step").write_text(str(step))
                tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))

    grid = tune.Tuner(reports, tune_config=tune.TuneConfig(metric="step", mode="max", scheduler=Recording()),
                      run_config=tune.RunConfig(storage_path=str(local_ray / "order"), callbacks=[Order()],
                                                checkpoint_config=tune.CheckpointConfig(num_to_keep=1), verbose=0),
                      ).fit()
    assert not grid.errors, grid.errors
    return seen


def test_tune_calls_callbacks_after_the_scheduler_decided(tune_order: dict[str, list[Any]]) -> None:
    """DonorPins runs in ``on_trial_result`` right after a PBT exploit: Tune must call the scheduler first."""
    assert len(tune_order["after_decision"]) == 4 and all(tune_order["after_decision"]), tune_order


def test_tune_calls_on_checkpoint_before_it_registers_the_checkpoint(tune_order: dict[str, list[Any]]) -> None:
    """LatestKept copies the trial's latest checkpoint in ``on_checkpoint``: Tune (``num_to_keep=1``) deletes it
    when it registers the new one, so the callback must run first, while the trial still names it."""
    assert len(tune_order["latest_on_disk"]) == 3 and all(tune_order["latest_on_disk"]), tune_order
    assert tune_order["left"] == ["checkpoint_000003"], "Tune deleted each earlier one on registration"


def test_state_api_settings_name_a_port_for_the_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.cluster import raystart

    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.setattr(raystart, "_api_address", None)
    settings = raystart.state_api_settings()
    assert os.environ["RAY_API_SERVER_ADDRESS"] == f"http://127.0.0.1:{settings['dashboard_port']}"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://10.0.0.1:8265")  # the user's own wins
    assert raystart.state_api_settings() == {}


def test_the_embedded_ray_starts_its_dashboard_only_on_rays_public_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the lean trainer nothing asks the State API (no Train cleaner; the reaper reads the GCS): no
    dashboard, a dozen processes fewer per sweep. On Ray's public path Train's cleaner needs it, named."""
    from sweeps.execution.cluster import raystart
    from sweeps.execution.warmstart import warm

    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    assert raystart.dashboard_settings(warm.Levers(True, True, False, {})) == {"include_dashboard": False}
    assert "RAY_API_SERVER_ADDRESS" not in os.environ
    public = raystart.dashboard_settings(warm.Levers(False, False, False, {"lean": "unchecked Ray"}))
    assert set(public) == {"dashboard_port"}
    assert os.environ["RAY_API_SERVER_ADDRESS"].endswith(f":{public['dashboard_port']}")


def test_the_dashboard_port_is_never_one_of_rays_own_defaults() -> None:
    """A port drawn from the ephemeral range once was 52365, the dashboard agent's default, and ray.init refused
    the sweep (seen in CI); the draw is repeated until it is none of Ray's fixed ports."""
    from sweeps import ports
    from sweeps.tracking import server

    drawn = iter([52365, 6379, 8265, 10001, 41234])
    assert ports.free_port(draw=lambda: next(drawn)) == 41234
    assert ports.free_port() not in ports.RAY_DEFAULT_PORTS and server.free_port() not in ports.RAY_DEFAULT_PORTS


def test_a_node_that_times_out_at_start_is_stopped_and_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once saw ray.init fail with "The current node timed out during startup" (Ray waits a fixed 30 s for
    its raylet, which a loaded machine can miss): the leftover processes are stopped and Ray started again; any
    other error, or the last attempt's, is raised. (Unit test: ray.init's outcome is scripted here.)"""
    import subprocess
    import sys

    import ray

    from sweeps.execution.cluster import raystart

    leftovers: list[subprocess.Popen] = []
    calls: list[dict] = []

    def init(**kwargs: Any) -> None:
        calls.append(kwargs)
        if len(calls) == 1:  # a raylet-like child left running by the failed start
            leftovers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # raylet"]))
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", init)
    raystart.init_local(num_cpus=1)
    assert len(calls) == 2 and calls[1] == {"num_cpus": 1}
    assert leftovers[0].wait(timeout=10) == -9, "the failed start's processes were stopped"

    def refuse(**kwargs: Any) -> None:
        raise ValueError("port 52365 is used by other components")

    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ValueError, match="52365"):
        raystart.init_local(num_cpus=1)
