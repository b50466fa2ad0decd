"""The sweep's own trial index (sweeps/reports/trialindex.py): kept by the driver's read as a run ends, read in
place of Tune's state while that state is unchanged, and exactly what Tune's state gives. On real Tune experiment
folders (the golden sets of tests/golden, written by Ray itself, result files and checkpoints included). Fast tier.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from test_golden_state import GOLDEN

from sweeps.reports import results, trialindex

SETTINGS = {"metric": "score", "mode": "max", "epochs": 4}


def _folder(name: str, tmp_path: Path) -> str:
    import ray

    src = GOLDEN / ray.__version__ / name
    if not src.is_dir():
        pytest.skip(f"no golden set for Ray {ray.__version__}")
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return str(dst)


def _same(a: list, b: list) -> bool:
    return json.dumps([asdict(r) for r in a], sort_keys=True) == json.dumps([asdict(r) for r in b], sort_keys=True)


@pytest.mark.parametrize("name", ["asha", "pbt"])
def test_the_index_gives_what_tunes_state_gives_and_is_read_in_its_place(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _folder(name, tmp_path)
    read = lambda **kw: results.load_records([exp], **SETTINGS, **kw)  # noqa: E731
    from_tune = read()
    assert from_tune and not (Path(exp) / trialindex.INDEX).exists(), "a read that does not keep writes nothing"
    kept = read(keep=True)
    assert _same(kept, from_tune) and (Path(exp) / trialindex.INDEX).is_file()

    calls = []
    real = results._from_tune
    monkeypatch.setattr(results, "_from_tune", lambda *a: calls.append(a) or real(*a))
    again = read()
    assert _same(again, from_tune) and not calls, "an index that matches is read in Tune's place"
    assert results.read_param_schedules(again) == results.read_param_schedules(from_tune)

    assert results.load_records([exp], "score", "min", 4) and calls, "other settings: Tune's state is read"
    calls.clear()
    state = next(Path(exp).glob("experiment_state-*.json"))
    state.write_text(state.read_text() + " ")  # Tune wrote its state again (a resume)
    os.utime(state, (state.stat().st_atime, state.stat().st_mtime + 5))
    assert _same(read(), from_tune) and calls, "a stale index: Tune's state is read"
    calls.clear()
    (Path(exp) / trialindex.INDEX).write_text("{not json")
    assert _same(read(keep=True), from_tune) and calls, "a damaged index is none, and is kept anew"
    calls.clear()
    assert _same(read(), from_tune) and not calls


def test_a_schedule_comes_back_from_the_index_as_the_report_reads_it(tmp_path: Path) -> None:
    """PBT's changes of a parameter, kept as JSON lists, come back as (iteration, value) tuples."""
    exp = _folder("asha", tmp_path)
    names = os.listdir(exp)
    record = results.TrialRecord("t1", "TERMINATED", {"lr": 0.01}, history=[{"score": float("nan")}],
                                 schedule={"lr": ((1, 0.1), (3, 0.01))})
    trialindex.write(exp, names, SETTINGS, [asdict(record)])
    (back,) = trialindex.read(exp, [*names, trialindex.INDEX], SETTINGS, results.TrialRecord)
    assert back.schedule == record.schedule and _same([back], [record])
    assert results.read_param_schedules([back]) == {"t1": {"lr": ((1, 0.1), (3, 0.01))}}


def test_a_reports_model_ids_are_kept_for_an_ended_sweep_until_its_state_changes_or_a_sync(tmp_path: Path) -> None:
    """A report of an ended sweep asks MLflow (a real SQLite store) for its trials' models once and keeps them
    beside its last experiment; later reports read them without MLflow until Tune's state
    changes or ``sweeps sync`` (which makes and replaces models) drops them; a running sweep's are never kept."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from sweeps.tracking import models

    exp = _folder("asha", tmp_path)
    db = tmp_path / "mlflow.db"
    c = MlflowClient(f"sqlite:///{db}")
    eid = c.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    made = {t: c.create_logged_model(eid, name=f"s-{t}", tags={models.TAG_SWEEP: "s", models.TAG_TRIAL: t,
                                                                 models.TAG_KIND: "trial"}).model_id
            for t in ("t1", "t2")}
    rec = SimpleNamespace(sweep_id="s", experiment_dirs=[exp], status="finished", mlflow_experiment_id=eid,
                          tracking_uri=f"sqlite:///{db}")
    kept = Path(exp) / trialindex.MODELS
    assert trialindex.model_ids(SimpleNamespace(**{**vars(rec), "status": "running"})) == made and not kept.exists()
    assert trialindex.model_ids(rec, keep=False) == made and not kept.exists(), "the driver's own report keeps none"
    assert trialindex.model_ids(rec) == made and kept.is_file()
    c.delete_logged_model(made["t2"])  # MLflow would answer otherwise now: only kept ids still name it
    assert trialindex.model_ids(rec) == made, "read from what was kept"
    state = next(Path(exp).glob("experiment_state-*.json"))
    os.utime(state, (state.stat().st_atime, state.stat().st_mtime + 5))  # a resume wrote Tune's state
    assert trialindex.model_ids(rec) == {"t1": made["t1"]}, "stale: MLflow is asked again"
    assert kept.is_file()
    trialindex.forget_models(rec)
    assert not kept.exists(), "a sync drops them"
