"""Spot capacity, fast tier: the failure section's preemption keys (bad values exit 2), their mapping onto Ray
Train's ``FailureConfig`` (and what a Ray without them is told), the loops' checkpoint on a notice and their
count across restarts, and the figures the report and the MLflow run give. The drain itself is in
tests/test_preemption_cluster_slow.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sweeps.cli import main as cli_main
from sweeps.config import build as config_build
from sweeps.config import compose
from sweeps.execution.train import trial
from sweeps.execution.tuning import tuner
from sweeps.preemptions import tally
from sweeps.reports import formats, summary
from sweeps.reports.results import TrialRecord
from sweeps.tracking.preempted import Spots
from trainables import common, preemption


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["failure.max_preemption_failures=-2"], "failure.max_preemption_failures: must be >= -1"),
        (["failure.max_preemption_failures=1.5"], "failure.max_preemption_failures: must be an integer"),
        (["failure.preemption_grace_s=-1"], "failure.preemption_grace_s: must be a number of seconds >= 0"),
        (["failure.preemption_grace_s=abc"], "failure.preemption_grace_s: must be a finite number"),
        (["failure.preemption_grace_s=.inf"], "failure.preemption_grace_s: must be a finite number"),
    ],
)
def test_bad_preemption_settings_exit_2_naming_the_key(overrides: list[str], needle: str,
                                                       capsys: pytest.CaptureFixture[str], sweeps_env: Any) -> None:
    rc = cli_main.main(["run", *overrides])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err, err
    assert not sweeps_env.home.exists(), "rejected input must not touch MLflow, storage or the index"


def _setup(*overrides: str) -> trial.TrialSetup:
    spec = config_build.build_spec(compose.compose(["+experiment=quickstart", *overrides]))
    return tuner.trial_setup(spec, "s-1")


def test_defaults_are_train_own_and_reach_each_trials_failure_config() -> None:
    import ray.train

    setup = _setup()
    assert (setup.max_preemption_failures, setup.preemption_grace_s) == (-1, 0.0)  # Train's own defaults
    setup = _setup("failure.max_preemption_failures=3", "failure.preemption_grace_s=12.5",
                   "failure.worker_max_failures=0")
    cfg = trial.failure_config(setup.worker_max_failures, setup.max_preemption_failures, setup.preemption_grace_s)
    assert isinstance(cfg, ray.train.FailureConfig)
    assert (cfg.max_failures, cfg.max_preemption_failures, cfg.preemption_grace_s) == (0, 3, 12.5)
    assert trial.preemption_not_applied(3, 12.5) is None  # Ray 2.60 takes both


def test_a_ray_without_the_parameters_is_told_once_and_gets_none(monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    import ray.train

    monkeypatch.setattr(trial, "preemption_params", lambda: ())  # Ray 2.53..2.59: FailureConfig lacks both
    cfg = trial.failure_config(1, 3, 12.5)
    assert (cfg.max_preemption_failures, cfg.preemption_grace_s) == (-1, 0.0)  # Train's defaults, untouched
    assert isinstance(cfg, ray.train.FailureConfig)
    with caplog.at_level(logging.INFO, logger="sweeps.execution.tuning.tuner"):
        tuner._say_preemption_support(_setup("failure.max_preemption_failures=3"))
    said = [r for r in caplog.records if "not applied" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, caplog.text
    assert "max_preemption_failures or preemption_grace_s" in said[0].getMessage()


# -- the loops' side ---------------------------------------------------------------------------------------
def test_a_notice_checkpoints_an_epoch_off_schedule_with_the_note(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    notices = iter([False, True])
    monkeypatch.setattr(preemption, "notice_now", lambda: asked.append(1) or next(notices))
    watch = preemption.Watch.start(None, "t1")
    with common.checkpoint_dir(0, 1, 5, watch) as d:  # epoch 1 of checkpoint_every=5: no checkpoint due
        assert d is None
    with common.checkpoint_dir(0, 2, 5, watch) as d:  # the notice: checkpoint now
        assert d is not None
        note = json.loads(Path(d, preemption.NOTE_FILE).read_text())
    assert note == {"trial": "t1", "preemptions": 0, "notice": True, "epoch": 2}
    with common.checkpoint_dir(0, 3, 5, watch) as d:  # and at every later report, asking Ray no more
        assert d is not None
    assert len(asked) == 2
    assert watch.metrics(3) == {preemption.EPOCH: 3}


def test_a_checkpoint_of_a_trial_never_preempted_holds_the_loops_files_only(tmp_path: Path) -> None:
    """No notice, no preemption counted: the checkpoint is the loop's own (a promoted champion's folder is what
    its loop wrote, nothing of ours), and a start from it counts from 0 as from a note of 0."""
    quiet = preemption.Watch("t1")
    quiet.write(str(tmp_path), 3)
    assert list(tmp_path.iterdir()) == []
    assert preemption.Watch.start(str(tmp_path), "t1") == preemption.Watch("t1")
    preemption.Watch("t1", preemptions=1).write(str(tmp_path), 4)  # preempted before: the count is kept
    assert preemption.read_note(str(tmp_path))["preemptions"] == 1


def test_a_start_from_a_noticed_checkpoint_of_the_same_trial_counts_one_preemption(tmp_path: Path) -> None:
    before = preemption.Watch("t1", preemptions=1, notice=True)
    before.write(str(tmp_path), 7)
    after = preemption.Watch.start(str(tmp_path), "t1")
    assert (after.preemptions, after.notice) == (2, False)
    assert after.metrics(8) == {preemption.PREEMPTIONS: 2, preemption.RESUMED_EPOCH: 7, preemption.EPOCH: 8}
    assert after.metrics(9) == {preemption.PREEMPTIONS: 2, preemption.EPOCH: 9}
    donor = preemption.Watch.start(str(tmp_path), "t2")  # a PBT donor's checkpoint: not this trial's history
    assert (donor.preemptions, donor.metrics(8)) == (0, {})
    preemption.Watch("t1", preemptions=2, notice=False).write(str(tmp_path), 9)  # a scheduled checkpoint
    assert preemption.Watch.start(str(tmp_path), "t1").preemptions == 2


def test_outside_a_train_worker_there_is_no_notice() -> None:
    assert preemption.notice_now() is False


def test_without_trains_watcher_the_loops_do_not_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.train

    def barrier() -> None:
        raise AssertionError("asked Ray although no watcher runs")

    monkeypatch.setattr(ray.train, "get_preemption_info", barrier)
    monkeypatch.setenv(preemption.WATCHER_ENV, "0")  # what sweeps sets on its embedded local Ray
    assert preemption.notice_now() is False


# -- the figures ---------------------------------------------------------------------------------------------
def _row(epoch: int, **extra: float) -> dict[str, float]:
    return {"epoch": float(epoch), "training_iteration": float(epoch), "val/acc": 0.5, **extra}


PRE, RES, EP = preemption.PREEMPTIONS, preemption.RESUMED_EPOCH, preemption.EPOCH


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([_row(1), _row(2)], (False, 0, 0)),
        # a notice at epoch 3, checkpoints at every epoch after: resumed from 4 = the last reported: nothing redone
        ([_row(1), _row(2), _row(3, **{EP: 3}), _row(4, **{EP: 4}), _row(5, **{PRE: 1, RES: 4, EP: 5})],
         (True, 1, 0)),
        # reports 3..5 under the notice, but the restart came from epoch 3's checkpoint: 2 epochs redone
        ([_row(3, **{EP: 3}), _row(4, **{EP: 4}), _row(5, **{EP: 5}), _row(4, **{PRE: 1, RES: 3, EP: 4}),
          _row(5, **{PRE: 1, EP: 5}), _row(6, **{EP: 6, PRE: 1}), _row(6, **{PRE: 2, RES: 5, EP: 6})],
         (True, 2, 3)),
        # a PBT exploit in between: the donor's checkpoint starts the loop's count afresh; the rows still count 2
        ([_row(3, **{EP: 3}), _row(4, **{PRE: 1, RES: 3, EP: 4}), _row(5), _row(6, **{EP: 6}),
          _row(7, **{PRE: 1, RES: 6, EP: 7})], (True, 2, 0)),
        # a notice and no restart (the trial finished before the deadline)
        ([_row(1), _row(2, **{EP: 2})], (True, 0, 0)),
    ],
)
def test_tally_counts_preemptions_and_epochs_redone(rows: list[dict[str, float]],
                                                   expected: tuple[bool, int, int]) -> None:
    t = tally(rows)
    assert (t.known, t.preemptions, t.epochs_lost) == expected


def test_the_report_lists_preempted_trials_and_says_what_is_not_counted() -> None:
    hit = [_row(1), _row(2, **{EP: 2}), _row(3, **{EP: 3}), _row(3, **{PRE: 1, RES: 2, EP: 3}), _row(4, **{PRE: 1})]
    records = [TrialRecord("hit", "TERMINATED", {"lr": 0.1}, history=hit),
               TrialRecord("calm", "TERMINATED", {"lr": 0.2}, history=[_row(1), _row(2)])]
    summ = summary.collect(records, "val/acc", "max", top_k=2, max_epochs=4)
    rows = {r.trial_id: r for r in summ.rows}
    assert (rows["hit"].preemptions, rows["hit"].epochs_lost) == (1, 1)
    assert (rows["calm"].preemptions, rows["calm"].epochs_lost) == (None, None)
    csv = formats.csv_text(summ).splitlines()
    header = csv[0].split(",")
    cells = {line.split(",")[0]: dict(zip(header, line.split(","), strict=False)) for line in csv[1:]}
    assert (cells["hit"]["preemptions"], cells["hit"]["epochs_lost"]) == ("1", "1")
    assert cells["calm"]["preemptions"] == ""
    from test_report import sweep_record

    text = formats.markdown(sweep_record(), summ)
    assert "## Node preemptions (spot capacity)" in text
    assert "| hit | TERMINATED | 1 | 1 |" in text
    assert "the epoch in flight when the node went is lost too" in text
    calm_only = summary.collect(records[1:], "val/acc", "max", top_k=2, max_epochs=4)
    assert "Node preemptions" not in formats.markdown(sweep_record(), calm_only)


def test_the_mlflow_run_is_tagged_only_with_what_this_driver_saw() -> None:
    spots = Spots()
    seen = [spots.tags("a", r) for r in
            [_row(1), _row(2, **{EP: 2}), _row(3, **{EP: 3}), _row(3, **{PRE: 1, RES: 2, EP: 3})]]
    assert seen[0] == {} and seen[-1] == {"preemptions": "1", "epochs_lost": "1"}
    resumed = Spots()  # a resumed driver: its first result is step 5; the epochs redone before it are unseen
    assert resumed.tags("a", _row(5, **{PRE: 1})) == {"preemptions": "1"}


# -- doctor --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("node", "drains", "words"),
    [
        (dict(ray="2.60.0", env="90", block=True), True, "`ray start --block` drains for 90 s on SIGTERM"),
        (dict(ray="2.60.0", env=None, block=True), True, "unset: Ray's default"),
        (dict(ray="2.60.0", env="0", block=True), False, "SIGTERM stops the node at once"),
        (dict(ray="2.60.0", env="90", block=False), False, "not started by `ray start --block`"),
        (dict(ray="2.53.0", env="90", block=True), False, "Ray 2.53.0 stops a node at once"),
        (dict(ray="2.60.0", env="90", block=None), None, "whether with --block: unknown"),
        (dict(error="GetTimeoutError: x"), None, "not observed"),
    ],
)
def test_doctor_says_whether_a_node_drains_and_what_it_cannot_see(node: dict[str, Any], drains: bool | None,
                                                                  words: str) -> None:
    from sweeps.execution.cluster import drain

    n = drain.NodeDrain("abcdef0123", "10.0.0.2", False, **node)
    ok, why = n.verdict()
    assert ok is drains and words in why, why
    good, text = drain.summary([drain.NodeDrain("ffff", "10.0.0.1", True, "2.60.0", None, False), n])
    assert good is (drains is True), text  # the head is listed, never judged
    assert "terminationGracePeriodSeconds" in text and "head ffff" in text


def test_the_script_adapter_checkpoints_on_a_notice_and_notes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import ray.train

    from trainables.script.session import META_DIR, Reporter

    sent: list[tuple[dict[str, float], dict[str, Any] | None]] = []

    def report(metrics: dict[str, float], checkpoint: Any = None) -> None:  # the folder goes after the report
        note = os.path.join(checkpoint.path, META_DIR, preemption.NOTE_FILE) if checkpoint else None
        sent.append((dict(metrics), json.loads(Path(note).read_text()) if note else None))

    def save(folder: str) -> None:
        Path(folder, "state.pt").write_text("x")

    monkeypatch.setattr(ray.train, "report", report)
    notices = iter([False, True])
    monkeypatch.setattr(preemption, "notice_now", lambda: next(notices))
    rep = Reporter("torch", "val_loss", 0, 1, 5, None, preemption.Watch.start(None, "t1"))
    rep.report({"val_loss": 1.0}, save)  # report 1 of checkpoint_every=5: no checkpoint
    rep.report({"val_loss": 0.9}, save)  # the notice: a checkpoint now, noted
    assert sent[0] == ({"val_loss": 1.0}, None)
    assert sent[1] == ({"val_loss": 0.9, preemption.EPOCH: 2},
                       {"trial": "t1", "preemptions": 0, "notice": True, "epoch": 2})
