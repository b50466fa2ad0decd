"""Promotion to the MLflow Model Registry (issue 6).

Fast tier: the gate rule, name/alias validation, checkpoint verification, trial choice, scoring, the table.
Slow tier: two tiny real sweeps in one SQLite-backed SWEEPS_HOME (a good one, then one with a tiny lr), and
``python -m sweeps promote/models`` as real subprocesses against them. The same two sweeps carry the report end to
end (its files and MLflow artifacts, ``report``/``list``/``compare`` as subprocesses): one sweep shape, run once.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SweepsEnv, mlflow_client, module_env
from freshvenv import FreshVenv, invocations, requirements_file

from sweeps.cli import models as cli_models
from sweeps.errors import BadInput, GateRefused
from sweeps.registry import gate, promote
from sweeps.reports.results import TrialRecord

# --------------------------------------------------------------------------------------------------------
# fast tier
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "   ", "a/b", "..", "../x", ".hidden", "a\\b", "has space", "x" * 101])
def test_bad_model_names_are_refused(name: str) -> None:
    with pytest.raises(BadInput, match="--model-name"):
        promote.check_model_name(name)


@pytest.mark.parametrize("name", ["digits-mlp", "quickstart", "m_1.v2"])
def test_plain_model_names_pass(name: str) -> None:
    assert promote.check_model_name(name) == name


@pytest.mark.parametrize("alias", ["", "a b", "x/y", "latest", "v3", "V12"])
def test_bad_aliases_are_refused(alias: str) -> None:
    with pytest.raises(BadInput, match="--alias"):
        promote.check_alias(alias)


def test_plain_alias_passes() -> None:
    assert promote.check_alias("champion") == "champion"
    assert promote.check_alias("v2-candidate") == "v2-candidate"


@pytest.mark.parametrize(("new", "old", "mode", "better"), [
    (0.9, 0.8, "max", True),
    (0.8, 0.9, "max", False),
    (0.9, 0.9, "max", False),
    (0.1, 0.2, "min", True),
    (0.2, 0.1, "min", False),
    (0.2, 0.2, "min", False),
    (math.nan, 0.5, "max", False),
    (math.nan, 0.5, "min", False),
    (0.5, math.nan, "max", True),
])
def test_is_better_is_strict_and_never_prefers_nan(new: float, old: float, mode: str, better: bool) -> None:
    assert gate.is_better(new, old, mode) is better


def _gate(champion: gate.Champion | None, value: float, mode: str = "max",
          force: bool = False) -> str | None:
    return promote.gate(champion, name="m", alias="champion", metric="val/acc", mode=mode, value=value,
                        force=force)


def test_gate_lets_a_free_alias_through() -> None:
    assert _gate(None, 0.1) is None


def test_gate_lets_a_better_candidate_replace_the_champion() -> None:
    note = _gate(gate.Champion("3", "val/acc", "max", 0.8), 0.9)
    assert note is not None and "version 3" in note and "forced" not in note


@pytest.mark.parametrize("value", [0.9, 0.7])
def test_gate_refuses_an_equal_or_worse_candidate(value: float) -> None:
    with pytest.raises(GateRefused, match=r"m@champion \(version 3\).*at least as good.*--force") as exc:
        _gate(gate.Champion("3", "val/acc", "max", 0.9), value)
    assert exc.value.exit_code == 3


def test_gate_uses_the_mode() -> None:
    champ = gate.Champion("1", "val/acc", "min", 0.3)
    assert _gate(champ, 0.2, mode="min") is not None
    with pytest.raises(GateRefused):
        _gate(champ, 0.4, mode="min")


def test_force_overrides_a_refusal_and_says_so() -> None:
    note = _gate(gate.Champion("3", "val/acc", "max", 0.9), 0.5, force=True)
    assert note is not None and "forced" in note


@pytest.mark.parametrize("champ", [
    gate.Champion("2", "val/loss", "max", 0.1),  # another metric
    gate.Champion("2", "val/acc", "min", 0.1),  # another mode
    gate.Champion("2", None, None, None),  # a version registered by hand, without lineage
])
def test_gate_refuses_a_champion_it_cannot_compare(champ: gate.Champion) -> None:
    with pytest.raises(GateRefused, match="cannot be compared"):
        _gate(champ, 0.99)
    assert "forced" in (_gate(champ, 0.99, force=True) or "")


def test_champion_reads_its_tags() -> None:
    champ = gate.Champion.from_tags("4", {"metric": "val/acc", "mode": "max", "metric_value": "0.93"})
    assert champ == gate.Champion("4", "val/acc", "max", 0.93)
    assert gate.Champion.from_tags("4", {"metric_value": "n/a"}).value is None


def test_score_speaks_the_tasks_terms() -> None:
    import numpy as np

    pred = {"label": ["b", "a", "b", "b"]}
    assert gate.score("classification", pred, np.array([1, 0, 0, 1]), ("a", "b")) == {"accuracy": 0.75}
    assert gate.score("classification", pred, np.array(["b", "a", "a", "b"], dtype=object)) == {"accuracy": 0.75}
    rmse = gate.score("regression", {"prediction": [1.0, 2.0, 3.0]}, np.array([1.0, 2.0, 5.0]))["rmse"]
    assert rmse == pytest.approx(math.sqrt(4 / 3))
    text = gate.score("text", {"scored": [3, 0, 1], "log_likelihood": [-3.0, 0.0, -1.0]}, None)
    assert text["perplexity"] == pytest.approx(math.e)
    assert math.isnan(gate.score("text", {"scored": [0], "log_likelihood": [0.0]}, None)["perplexity"])


def test_verify_checkpoint_refuses_a_missing_folder_and_leaves_its_files_to_the_loader(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no checkpoint left"):
        promote.verify_checkpoint(None, "t1")
    with pytest.raises(BadInput, match="is missing"):
        promote.verify_checkpoint(str(tmp_path / "gone"), "t1")
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "state.pt").write_bytes(b"x")  # any layout: model.pt/optimizer.pt/meta.json not required
    assert promote.verify_checkpoint(str(tmp_path / "own"), "t1") == str(tmp_path / "own")


def _trial(tid: str, accs: list[float], status: str = "TERMINATED") -> TrialRecord:
    return TrialRecord(trial_id=tid, status=status, params={},
                       history=[{"val/acc": a, "training_iteration": i + 1} for i, a in enumerate(accs)],
                       best_checkpoint=f"/ck/{tid}")


def test_pick_trial_takes_the_best_or_the_named_one() -> None:
    trials = [_trial("a", [0.5, 0.7]), _trial("b", [0.9, 0.8]), _trial("c", [0.95], status="ERROR")]
    assert promote.pick_trial(trials, "val/acc", "max", "s", None).trial_id == "b"
    assert promote.pick_trial(trials, "val/acc", "max", "s", "a").trial_id == "a"


def test_pick_trial_refuses_unknown_failed_and_empty() -> None:
    trials = [_trial("a", [0.5]), _trial("c", [0.95], status="ERROR"), _trial("n", [math.nan])]
    with pytest.raises(BadInput, match="--trial: no trial 'zz'.*a, c, n"):
        promote.pick_trial(trials, "val/acc", "max", "s", "zz")
    with pytest.raises(BadInput, match="trial c did not succeed"):
        promote.pick_trial(trials, "val/acc", "max", "s", "c")
    with pytest.raises(BadInput, match="trial n did not succeed"):
        promote.pick_trial(trials, "val/acc", "max", "s", "n")
    with pytest.raises(BadInput, match="no successful trial"):
        promote.pick_trial(trials[1:], "val/acc", "max", "s", None)


def test_format_table_aligns_columns() -> None:
    text = cli_models.format_table([{"name": "m", "version": "1", "aliases": "champion"},
                                 {"name": "model-b", "version": "12", "aliases": "-"}])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "version", "aliases"]
    assert lines[1].split() == ["m", "1", "champion"]
    assert len({line.index(line.split()[1]) for line in lines}) == 1  # second column starts at one offset
    assert cli_models.format_table([]) == ""


# --------------------------------------------------------------------------------------------------------
# slow tier: real sweeps, real MLflow registry (SQLite), the CLI as subprocesses
# --------------------------------------------------------------------------------------------------------

# single-process trials in the trial's own process: promotion and the report are the promise here, not workers
TINY = ["+experiment=quickstart", "sweep.num_samples=2", "trainable.params.epochs=2", "scheduler.max_t=2",
        "scheduler.grace_period=1", "report.enabled=false", "cluster.health_check_interval_s=0.1",
        "cluster.worker_start_timeout_s=60", "trainable.num_workers=1"]
# the good sweep auto-promotes into an empty registry, under its own name and alias; five epochs at a brisk lr
# (digits epochs are ~0.1 s; three gave 0.947): its champion must reach 0.95 on the raw held-out digits. It writes
# its report where report.dir says by default (reports/ under the cwd)
GOOD = [*TINY, "trainable.params.epochs=5", "scheduler.max_t=5", "search_space.lr.low=0.02",
        "search_space.lr.high=0.05", "promote.enabled=true", "promote.model_name=auto-digits",
        "promote.alias=staging", "report.enabled=true"]
# the worse sweep also asks for auto-promotion at its end: the same gate refuses it. Its report goes where its
# report.dir says, its leaderboard cut to report.top_k of its 2 trials
WORSE = [*TINY, "search_space.lr.low=1e-6", "search_space.lr.high=2e-6", "promote.enabled=true",
         "report.enabled=true", "report.dir=elsewhere", "report.top_k=1"]
REPORT_FILES = ("trials.csv", "summary.md", "report.html", "learning_curves.png", "metric_vs_params.png",
                "parallel_coordinates.png")
NAME = "quickstart"  # the default model name: the experiment's


def _record(env: SweepsEnv, sweep_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((env.home / "sweeps" / f"{sweep_id}.json").read_text())
    return data


def _run_sweep(env: SweepsEnv, overrides: list[str], exit_code: int = 0) -> dict[str, Any]:
    folder = env.home / "sweeps"
    before = set(folder.glob("[!.]*.json")) if folder.is_dir() else set()
    proc = env.run("run", *overrides, timeout=900)
    assert proc.returncode == exit_code, proc.stdout[-3000:] + proc.stderr[-3000:]
    (new,) = set(folder.glob("[!.]*.json")) - before
    rec = _record(env, new.stem)
    assert rec["status"] == "finished" and rec["best"], rec
    return {**rec, "_stdout": proc.stdout}


def _client(env: SweepsEnv) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=env.tracking_uri, registry_uri=env.tracking_uri)


def _versions(env: SweepsEnv, name: str = NAME) -> dict[str, Any]:
    return {str(mv.version): mv for mv in _client(env).search_model_versions(f"name = '{name}'")}


def _champion(env: SweepsEnv, name: str = NAME) -> Any:
    return _client(env).get_model_version_by_alias(name, "champion")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweepsEnv]:
    yield from module_env(tmp_path_factory, "promote")


@pytest.fixture(scope="module")
def good(env: SweepsEnv) -> dict[str, Any]:
    """Why its own sweeps (this one and the worse one): the gate needs a registry whose history it knows (an empty
    one, then a champion from the good sweep, then a worse candidate), so the registry is this module's alone."""
    return _run_sweep(env, GOOD)


@pytest.fixture(scope="module")
def promoted(env: SweepsEnv, good: dict[str, Any]) -> Any:
    """`promote latest` on the good sweep (the only one yet): the first champion."""
    return env.run("promote", "latest", timeout=300)


@pytest.fixture(scope="module")
def worse(env: SweepsEnv, promoted: Any) -> dict[str, Any]:
    return _run_sweep(env, WORSE, exit_code=3)  # the gate refused the auto-promotion


@pytest.fixture(scope="module")
def refused(env: SweepsEnv, worse: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the gate's refusal of the worse sweep, the registry's versions before, after)."""
    before = _versions(env)
    proc = env.run("promote", worse["sweep_id"], timeout=300)
    return proc, before, _versions(env)


@pytest.fixture(scope="module")
def forced(env: SweepsEnv, refused: Any, worse: dict[str, Any]) -> Any:
    return env.run("promote", worse["sweep_id"], "--force", timeout=300)


@pytest.mark.slow
def test_promote_latest_registers_the_best_trial_with_lineage(env: SweepsEnv, good: dict[str, Any],
                                                              promoted: Any) -> None:
    assert promoted.returncode == 0, promoted.stderr[-3000:]
    assert "registered quickstart version 1 as @champion" in promoted.stdout
    mv = _champion(env)
    tags = mv.tags
    assert str(mv.version) == "1"
    assert tags["sweep_id"] == good["sweep_id"]
    assert tags["trial_id"] == good["best"]["trial_id"]
    assert (tags["metric"], tags["mode"]) == ("val/acc", "max")
    assert float(tags["metric_value"]) == pytest.approx(good["best"]["value"])
    assert tags["config_digest"] == good["digest"] and len(good["digest"]) == 16
    c = _client(env)
    assert tags["git_commit"] == c.get_run(good["parent_run_id"]).data.tags["git_commit"]
    assert 0.0 < float(tags["accuracy"]) <= 1.0
    # logged in the trial's own run, which stays FINISHED (not reopened)
    run = c.get_run(tags["run_id"])
    assert run.data.tags["sweeps.trial_id"] == tags["trial_id"]
    assert run.data.tags["mlflow.parentRunId"] == good["parent_run_id"]
    assert run.info.status == "FINISHED"
    assert mv.source.startswith("models:/")
    assert mv.source.removeprefix("models:/") in {o.model_id for o in run.outputs.model_outputs}


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _md_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the pipe table under ``## heading``."""
    lines = [ln for ln in text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0].splitlines() if ln.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines[2:]]


def _imgs(html: str) -> list[str]:
    return re.findall(r'<img [^>]*src="([^"]*)"', html)


@pytest.mark.slow
def test_the_sweeps_report_its_artifacts_and_report_rebuilt_from_results_or_mlflow(env: SweepsEnv,
                                                                                 good: dict[str, Any]) -> None:
    """The good sweep's report (report.enabled, default report.dir): its files, its MLflow artifacts, CPU-seconds
    from the sweep's own config; ``report`` rebuilt from the stored results (nothing rerun) and, with the Ray
    results gone, from the MLflow runs alone; ``list``; ``report --format html`` alone."""
    out = env.root / "reports" / "quickstart" / good["sweep_id"]
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    rows = _csv(out / "trials.csv")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"TERMINATED"}
    assert rows[0]["rank"] == "1" and rows[0]["trial_id"] == good["best"]["trial_id"]
    assert float(rows[0]["best/val/acc"]) == pytest.approx(good["best"]["value"])
    # a trial holds its own process's CPUs for its wall time (one worker, in the trial's process): from the sweep's
    # own config
    cfg = good["config"]
    held = float((cfg["trainable"].get("resources_per_worker") or {}).get("CPU", 1))
    assert cfg["trainable"]["num_workers"] == 1 and held == 1.0 == good["per_trial"]["CPU"], good["per_trial"]
    assert all(float(r["cpu_s"]) == pytest.approx(held * float(r["wall_s"]), rel=1e-3) for r in rows)
    text = (out / "summary.md").read_text()
    assert f"trial **{good['best']['trial_id']}**" in text
    assert "importance: not computed: needs at least 3 finished trials" in text  # 2 trials only
    imgs = _imgs((out / "report.html").read_text())
    assert len(imgs) >= 3 and all(s.startswith("data:image/png;base64,") for s in imgs)
    arts = {a.path for a in mlflow_client(env.tracking_uri).list_artifacts(good["parent_run_id"], "report")}
    assert {"report/trials.csv", "report/summary.md", "report/report.html", "report/learning_curves.png"} <= arts

    # rebuilt from stored results, nothing rerun: the same trial table (the good sweep is the latest: the worse
    # one runs later, clones are dated earlier)
    records = set((env.home / "sweeps").glob("[!.]*.json"))
    proc = env.run("report", "latest", "--format", "csv", "--out", "rebuilt", check=True)
    rebuilt = env.root / "rebuilt"
    assert sorted(p.name for p in rebuilt.iterdir()) == ["trials.csv"]
    assert (rebuilt / "trials.csv").read_text() == (out / "trials.csv").read_text()
    assert str(rebuilt / "trials.csv") in proc.stdout
    assert set((env.home / "sweeps").glob("[!.]*.json")) == records, "a report starts no sweep"

    # Ray results gone (a copy of the sweep's record whose Ray folder is deleted): rebuilt from its MLflow runs,
    # the same trials
    gone_id, gone_dir = _clone(env, good, "raygone")
    shutil.rmtree(gone_dir)
    proc = env.run("report", gone_id, "--format", "csv", "--out", "from_mlflow", check=True)
    assert "rebuilding from its MLflow runs" in proc.stderr
    from_mlflow = {r["trial_id"]: r for r in _csv(env.root / "from_mlflow" / "trials.csv")}
    for r in rows:
        m = from_mlflow[r["trial_id"]]
        for col in ("rank", "status", "best/val/acc", "final/val/acc", "epochs", "early_stopped", "wall_s", "cpu_s"):
            assert m[col] == r[col], col
        assert {k: v for k, v in m.items() if k.startswith("param/")} == \
            {k: v for k, v in r.items() if k.startswith("param/")}

    listing = env.run("list", check=True).stdout.splitlines()
    assert listing[0].split() == ["sweep_id", "experiment", "date", "status", "best", "trials"]
    (line,) = [ln for ln in listing[1:] if ln.split()[0] == good["sweep_id"]]
    assert "finished" in line and line.split()[-1] == "2", line

    # the HTML report alone, rebuilt from the stored sweep: the page and the plots it embeds, nothing else
    env.run("report", good["sweep_id"], "--format", "html", "--out", "html_only", check=True)
    html_files = sorted(p.name for p in (env.root / "html_only").iterdir())
    assert "report.html" in html_files and all(n == "report.html" or n.endswith(".png") for n in html_files), \
        html_files
    page = (env.root / "html_only" / "report.html").read_text()
    assert f"<td>{good['best']['trial_id']}</td>" in page
    imgs = _imgs(page)
    assert len(imgs) == len(html_files) - 1 and all(i.startswith("data:image/png;base64,") for i in imgs)


def _raw_digits() -> tuple[Any, Any, list[str]]:
    """The held-out digits exactly as scikit-learn gives them (the split the trainable holds out)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    frame = load_digits(as_frame=True)
    _, x, _, y = train_test_split(frame.data.to_numpy(), frame.target.to_numpy(), test_size=0.2, random_state=0,
                                  stratify=frame.target.to_numpy())
    return x, y, list(frame.data.columns)


@pytest.mark.slow
def test_champion_loads_in_a_fresh_virtualenv_and_classifies_raw_digits(env: SweepsEnv, promoted: Any,
                                                                        fresh_venv: FreshVenv) -> None:
    import numpy as np

    assert promoted.returncode == 0, promoted.stderr[-3000:]
    uri = f"models:/{NAME}@champion"
    reqs = requirements_file(uri, env.tracking_uri)
    lines = Path(reqs).read_text().split()
    assert "torch==2.13.0" in lines and {r.split("==")[0] for r in lines} >= {"mlflow", "torch", "numpy", "pandas"}
    assert not any("+" in r for r in lines), lines  # installable from any index
    fresh_venv.install_requirements(reqs)
    x, y, columns = _raw_digits()
    job = {"uri": uri, "frame": {"columns": columns, "data": x.tolist()}}
    result, where = fresh_venv.predict([job], env.tracking_uri, env.root / "digits-pred.json")
    assert not where["sweeps"] and not where["trainables"], where  # only the model's requirements are there
    assert result["inputs"] == columns and result["outputs"][:2] == ["label", "proba_0"]
    labels = np.asarray(result["pred"]["label"])
    accuracy = float((labels == y).mean())
    assert accuracy >= 0.95, accuracy
    tags = _champion(env).tags
    assert accuracy == pytest.approx(float(tags["accuracy"]), abs=1e-12), "what promote reported"
    assert accuracy == pytest.approx(float(tags["metric_value"]), abs=0.02)  # the sweep's rank-averaged val/acc
    probs = np.array([result["pred"][f"proba_{k}"] for k in range(10)]).T  # (N, 10)
    assert np.allclose(probs.sum(axis=1), 1.0) and (probs.argmax(axis=1) == labels).all()


@pytest.mark.slow
def test_champion_is_served_from_the_fresh_virtualenv_on_raw_rows(env: SweepsEnv, promoted: Any,
                                                                  fresh_venv: FreshVenv) -> None:
    x, y, columns = _raw_digits()
    fresh_venv.install_requirements(requirements_file(f"models:/{NAME}@champion", env.tracking_uri))
    with fresh_venv.serve(f"models:/{NAME}@champion", env.tracking_uri, env.root / "serve-digits.log") as url:
        rows = x[:40].astype(int).tolist()  # JSON integers, as a client sends pixel values
        answer = invocations(url, {"dataframe_split": {"columns": columns, "data": rows}})
    preds = answer["predictions"]
    assert len(preds) == 40 and set(preds[0]) == {"label", *(f"proba_{k}" for k in range(10))}
    assert sum(p["label"] == t for p, t in zip(preds, y[:40], strict=True)) >= 36


# two promotions at once, the better one left at the alias: conftest.race, run through a real mlflow server by
# tests/test_tracking_server.py (the lock on the embedded SQLite store: tests/test_lock_namespaces.py)


@pytest.mark.slow
def test_promoting_an_equal_candidate_is_refused(env: SweepsEnv, good: dict[str, Any], promoted: Any) -> None:
    name = "quickstart-eq"  # its own model, so the champion of NAME is not disturbed
    first = env.run("promote", good["sweep_id"], "--model-name", name, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    again = env.run("promote", good["sweep_id"], "--model-name", name, timeout=300)
    assert again.returncode == 3, again.stderr[-3000:]
    assert "at least as good" in again.stderr and "--force" in again.stderr
    assert list(_versions(env, name)) == ["1"]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [
    (["--model-name", ""], "--model-name: the model name is empty"),
    (["--model-name", "../models/x"], "looks like a path"),
    (["--alias", "latest"], "--alias: 'latest' is reserved"),
    (["--trial", "nosuchtrial"], "--trial: no trial 'nosuchtrial'"),
])
def test_bad_input_is_rejected_before_anything_is_written(env: SweepsEnv, good: dict[str, Any], promoted: Any,
                                                          args: list[str], message: str) -> None:
    before = _versions(env)
    proc = env.run("promote", good["sweep_id"], *args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in proc.stderr
    assert _versions(env).keys() == before.keys()


@pytest.mark.slow
def test_unknown_sweep_id_is_rejected(env: SweepsEnv, good: dict[str, Any]) -> None:
    proc = env.run("promote", "quickstart-19990101-000000-dead", timeout=300)
    assert proc.returncode == 2
    assert "SWEEP_ID: no sweep 'quickstart-19990101-000000-dead'" in proc.stderr
    assert good["sweep_id"] in proc.stderr  # lists the known ones


def _clone(env: SweepsEnv, rec: dict[str, Any], tag: str) -> tuple[str, Path]:
    """A copy of a sweep's Ray folder and index record under a new id, to break without harm."""
    src = Path(rec["experiment_dirs"][0])
    dst = env.root / "clones" / tag / src.name  # same folder name: Ray relocates the experiment
    shutil.copytree(src, dst)
    new_id = f"{rec['sweep_id']}-{tag}"
    clone = {k: v for k, v in rec.items() if not k.startswith("_")}  # only SweepRecord fields
    clone.update(sweep_id=new_id, experiment_dirs=[str(dst)], created=rec["created"] - 1)
    (env.home / "sweeps" / f"{new_id}.json").write_text(json.dumps(clone))
    return new_id, dst


def _trial_dir(exp_dir: Path, trial_id: str) -> Path:
    (d,) = [p for p in exp_dir.iterdir() if p.is_dir() and trial_id in p.name]
    return d


@pytest.mark.slow
def test_deleted_checkpoint_folder_is_refused(env: SweepsEnv, good: dict[str, Any], promoted: Any) -> None:
    sweep_id, exp_dir = _clone(env, good, "deleted")
    trial_id = good["best"]["trial_id"]
    folders = list(_trial_dir(exp_dir, trial_id).glob("checkpoint_*"))
    assert folders
    for d in folders:
        shutil.rmtree(d)
    before = _versions(env)
    proc = env.run("promote", sweep_id, "--force", timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"trial {trial_id} has no checkpoint left on disk" in proc.stderr
    assert _versions(env).keys() == before.keys()


@pytest.mark.slow
def test_incomplete_checkpoint_is_refused(env: SweepsEnv, good: dict[str, Any], promoted: Any) -> None:
    sweep_id, exp_dir = _clone(env, good, "incomplete")
    trial_dir = _trial_dir(exp_dir, good["best"]["trial_id"])
    for d in trial_dir.glob("checkpoint_*"):
        (d / "model.pt").unlink()
    proc = env.run("promote", sweep_id, "--force", timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "is incomplete" in proc.stderr and "model.pt" in proc.stderr and str(trial_dir) in proc.stderr


@pytest.mark.slow
def test_sweep_without_a_successful_trial_is_refused(env: SweepsEnv, good: dict[str, Any],
                                                     promoted: Any) -> None:
    sweep_id, exp_dir = _clone(env, good, "noresults")
    for result in exp_dir.glob("*/result.json"):
        result.write_text("")  # no trial ever reported a metric
    proc = env.run("promote", sweep_id, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"sweep {sweep_id} has no successful trial" in proc.stderr


@pytest.mark.slow
def test_worse_sweep_is_refused_by_the_gate(good: dict[str, Any], worse: dict[str, Any],
                                            refused: Any) -> None:
    proc, before, after = refused
    assert worse["best"]["value"] < good["best"]["value"]
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "quickstart@champion (version 1)" in proc.stderr and "at least as good" in proc.stderr
    assert "--force" in proc.stderr
    assert after.keys() == before.keys()  # nothing registered


@pytest.mark.slow
def test_auto_promotion_registers_into_an_empty_registry_with_its_name_and_alias(env: SweepsEnv,
                                                                                good: dict[str, Any]) -> None:
    assert "promotion: registered auto-digits version 1 as @staging" in good["_stdout"], good["_stdout"][-2000:]
    mv = _client(env).get_model_version_by_alias("auto-digits", "staging")
    assert mv.tags["sweep_id"] == good["sweep_id"] and mv.tags["trial_id"] == good["best"]["trial_id"]


@pytest.mark.slow
def test_auto_promotion_at_the_end_of_a_sweep_uses_the_same_gate(worse: dict[str, Any]) -> None:
    assert "promotion: not promoted: promote: quickstart@champion (version 1)" in worse["_stdout"]
    assert "at least as good" in worse["_stdout"]


@pytest.mark.slow
def test_report_dir_and_top_k_then_compare_of_the_two_sweeps(env: SweepsEnv, good: dict[str, Any],
                                                              worse: dict[str, Any]) -> None:
    """The worse sweep's report goes where its report.dir says, its leaderboard cut to report.top_k=1 of its 2
    trials; ``compare`` of the two sweeps: best trials side by side, CPU-seconds and epochs from their trial tables."""
    out = env.root / "reports" / "quickstart" / good["sweep_id"]
    other_out = env.root / "elsewhere" / "quickstart" / worse["sweep_id"]
    assert (other_out / "summary.md").is_file()
    assert not (env.root / "reports" / "quickstart" / worse["sweep_id"]).exists()
    assert len(_md_rows((other_out / "summary.md").read_text(), "Leaderboard")) == 1, "report.top_k=1"
    assert len(_csv(other_out / "trials.csv")) == 2, "the trial table keeps every trial"

    env.run("compare", good["sweep_id"], worse["sweep_id"], check=True)
    cmp_dir = env.root / "reports" / "compare" / f"{good['sweep_id']}__vs__{worse['sweep_id']}"
    assert (cmp_dir / "compare.html").is_file()
    side = {r[0]: r for r in _md_rows((cmp_dir / "compare.md").read_text(), "Comparison")}
    assert side["best trial"][1:3] == [good["best"]["trial_id"], worse["best"]["trial_id"]]
    a_rows, b_rows = _csv(out / "trials.csv"), _csv(other_out / "trials.csv")
    cpu_a, cpu_b = (sum(float(r["cpu_s"]) for r in t) for t in (a_rows, b_rows))
    assert float(side["CPU-seconds"][1]) == pytest.approx(cpu_a, rel=1e-2)
    assert float(side["CPU-seconds"][2]) == pytest.approx(cpu_b, rel=1e-2)
    assert float(side["CPU-seconds"][3]) == pytest.approx(cpu_b - cpu_a, rel=1e-2, abs=0.1), side["CPU-seconds"]
    epochs_a, epochs_b = (sum(int(r["epochs_run"]) for r in t) for t in (a_rows, b_rows))
    assert side["epochs trained"][1:4] == [str(epochs_a), str(epochs_b), f"{epochs_b - epochs_a:+d}"]


@pytest.mark.slow
def test_force_overrides_the_gate(env: SweepsEnv, worse: dict[str, Any], forced: Any) -> None:
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "forced" in forced.stdout
    mv = _champion(env)
    assert str(mv.version) == "2"
    assert mv.tags["sweep_id"] == worse["sweep_id"] and mv.tags["forced"] == "true"
    assert float(mv.tags["metric_value"]) == pytest.approx(worse["best"]["value"])


@pytest.mark.slow
def test_models_lists_versions_with_alias_metric_and_lineage(env: SweepsEnv, good: dict[str, Any],
                                                             worse: dict[str, Any], forced: Any) -> None:
    proc = env.run("models", NAME, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:4] == ["name", "version", "aliases", "metric"]
    rows = {line.split()[1]: line.split() for line in lines[1:]}
    assert set(rows) == {"1", "2"}  # quickstart-eq is another model: not listed under NAME
    assert rows["2"][2] == "champion" and rows["1"][2] == "-"
    assert good["sweep_id"] in rows["1"] and good["best"]["trial_id"] in rows["1"]
    assert worse["sweep_id"] in rows["2"]
    assert rows["1"][3].startswith("val/acc=")
    everything = env.run("models", timeout=120)
    assert everything.returncode == 0 and "quickstart-eq" in everything.stdout


@pytest.mark.slow
def test_models_with_an_unknown_name_lists_the_registered_ones(env: SweepsEnv, promoted: Any) -> None:
    proc = env.run("models", "nosuchmodel", timeout=120)
    assert proc.returncode == 2
    assert "no registered model 'nosuchmodel'" in proc.stderr and NAME in proc.stderr
