"""Registered models that someone else loads and serves: diabetes (regression) and wine_state (its own layout).

Two tiny real sweeps run at once (2 trials, 3 epochs, 1 Train worker each, each in its own SWEEPS_HOME), are
promoted with ``python -m sweeps promote``, and the champions are loaded with ``mlflow.pyfunc.load_model`` in
the session's fresh virtualenv (tests/freshvenv.py: only the models' requirements, no sweeps, no trainables)
and served from it with ``mlflow models serve --env-manager local``. Inputs are raw scikit-learn rows; answers
come back in the task's terms. digits and charlm get the same checks in test_promote.py and
test_trainables_scale.py, on the sweeps those files already run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FAST, REPO, SweepsEnv, mlflow_client
from freshvenv import FreshVenv, invocations, requirements_file

DIABETES = ["+experiment=diabetes_asha", "scheduler=fifo", "sweep.num_samples=2", "trainable.params.epochs=3",
            "trainable.num_workers=1", "report.enabled=false", *FAST[1:]]
WINE = ["+experiment=wine_state", "sweep.num_samples=2", "trainable.params.epochs=3", "report.enabled=false",
        *FAST[1:]]


@pytest.fixture(scope="module")
def promoted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SweepsEnv]]:
    """Both sweeps at once, then both promotions: {"diabetes": env, "wine": env}."""
    envs = {"diabetes": SweepsEnv(tmp_path_factory.mktemp("diabetes")),
            "wine": SweepsEnv(tmp_path_factory.mktemp("wine_state"))}
    try:
        procs = {k: envs[k].popen("run", *args) for k, args in (("diabetes", DIABETES), ("wine", WINE))}
        for k, p in procs.items():
            out = p.communicate(timeout=900)[0]
            assert p.returncode == 0, f"{k} sweep exited {p.returncode}:\n{out[-4000:]}"
        for k, name in (("diabetes", "diabetes-test"), ("wine", "wine-state-test")):
            envs[k].run("promote", "latest", "--model-name", name, check=True, timeout=600)
        yield envs
    finally:
        for e in envs.values():
            e.cleanup()


def _raw_diabetes() -> tuple[Any, Any, list[str]]:
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    d = load_diabetes()
    _, x, _, y = train_test_split(d.data, d.target, test_size=0.2, random_state=0)
    return x, y, list(d.feature_names)


def _raw_wine() -> tuple[Any, Any, list[str], list[str]]:
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    w = load_wine()
    _, x, _, y = train_test_split(w.data, w.target, test_size=0.25, random_state=0, stratify=w.target)
    return x, y, list(w.feature_names), list(w.target_names)


@pytest.fixture(scope="module")
def loaded(promoted: dict[str, SweepsEnv], fresh_venv: FreshVenv) -> list[dict[str, Any]]:
    """Both champions loaded in the fresh venv (one process) and asked about the raw held-out rows."""
    jobs = []
    for key, name, (x, _, columns, *_) in (("diabetes", "diabetes-test", _raw_diabetes()),
                                            ("wine", "wine-state-test", _raw_wine())):
        uri, store = f"models:/{name}@champion", promoted[key].tracking_uri
        fresh_venv.install_requirements(requirements_file(uri, store))
        jobs.append({"uri": uri, "tracking_uri": store, "frame": {"columns": columns, "data": x.tolist()}})
    return fresh_venv.predict(jobs, promoted["diabetes"].tracking_uri, promoted["diabetes"].root / "pred.json")


@pytest.mark.slow
def test_the_fresh_venv_holds_neither_sweeps_nor_trainables(loaded: list[dict[str, Any]]) -> None:
    """Shares the module's two sweeps and their promoted models (fixture ``loaded``): the fresh virtualenv that loads
    them has neither sweeps nor the trainables."""
    where = loaded[-1]
    assert not where["sweeps"] and not where["trainables"], where
    assert str(REPO) not in where["path"], where["path"]  # run from the venv, not from the repository


@pytest.mark.slow
def test_diabetes_champion_predicts_disease_progression_in_original_units(promoted: dict[str, SweepsEnv],
                                                                         loaded: list[dict[str, Any]]) -> None:
    x, y, columns = _raw_diabetes()
    result = loaded[0]
    assert result["inputs"] == columns and result["outputs"] == ["prediction"]
    pred = np.asarray(result["pred"]["prediction"])
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    tags = mlflow_client(promoted["diabetes"].tracking_uri).get_model_version_by_alias(
        "diabetes-test", "champion").tags
    assert rmse == pytest.approx(float(tags["rmse"]), rel=1e-6), "the RMSE promote reported, from raw rows"
    # original units: the target is 25..346 with mean ~152; a standardized answer would sit near 0
    assert abs(float(pred.mean()) - float(y.mean())) < 40 and 20 < rmse < 120, (pred.mean(), rmse)
    assert tags["task"] == "regression" and float(tags["metric_value"]) < 1.5  # the sweep's standardized val/rmse


@pytest.mark.slow
def test_own_layout_champion_was_promoted_from_state_pt_and_names_its_classes(
        promoted: dict[str, SweepsEnv], loaded: list[dict[str, Any]]) -> None:
    x, y, columns, names = _raw_wine()
    tags = mlflow_client(promoted["wine"].tracking_uri).get_model_version_by_alias("wine-state-test",
                                                                                   "champion").tags
    checkpoint = Path(tags["checkpoint"])
    assert sorted(p.name for p in checkpoint.iterdir()) == ["state.pt"], "its own layout, nothing else"
    result = loaded[1]
    assert result["inputs"] == columns and result["outputs"] == ["label", *(f"proba_{n}" for n in names)]
    labels = result["pred"]["label"]
    accuracy = float(np.mean([label == names[t] for label, t in zip(labels, y, strict=True)]))
    assert accuracy == pytest.approx(float(tags["accuracy"]), abs=1e-12) and accuracy >= 0.85, accuracy


@pytest.mark.slow
def test_own_layout_champion_is_served_from_the_fresh_venv(promoted: dict[str, SweepsEnv], loaded: Any,
                                                          fresh_venv: FreshVenv) -> None:
    x, y, columns, names = _raw_wine()
    env = promoted["wine"]
    with fresh_venv.serve("models:/wine-state-test@champion", env.tracking_uri, env.root / "serve.log") as url:
        answer = invocations(url, {"dataframe_split": {"columns": columns, "data": x[:20].tolist()}})
        # columns by name in any order; a missing one is refused with the column's name
        shuffled = invocations(url, {"dataframe_split": {"columns": columns[::-1],
                                                         "data": x[:20, ::-1].tolist()}})
        with pytest.raises(Exception, match="400"):
            invocations(url, {"dataframe_split": {"columns": columns[1:], "data": x[:2, 1:].tolist()}})
    preds = answer["predictions"]
    assert [p["label"] for p in preds] == [p["label"] for p in shuffled["predictions"]]
    assert all(p["label"] in names and abs(sum(p[f"proba_{n}"] for n in names) - 1) < 1e-6 for p in preds)
    assert sum(p["label"] == names[t] for p, t in zip(preds, y[:20], strict=True)) >= 17
