"""``sweeps new trainable``: the scaffold's files, its refusals, and a real sweep of it from a clean copy.

The default template (no ``--from``) made and swept to its end: tests/test_installed_slow.py (``new trainable
mymlp``, then ``run +experiment=mymlp``, from the installed wheel); a clean clone's ``trainables/NAME.py`` swept:
the ``linex`` tests below.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SweepsEnv, clean_clone, mlflow_client

from sweeps.errors import BadInput
from sweeps.ops import scaffold


@pytest.mark.parametrize(("name", "source", "says"), [
    ("Bad-Name", None, "not a trainable name"),
    ("digits", None, "exists already"),
    ("mine", "not a path", "--from"),
    ("mine", "ray.util.helpers:train", "'ray.util.helpers', which may never be allowed"),
    ("mine", "os:system", "'os', which may never be allowed"),
])
def test_scaffold_refusals_name_the_argument(name: str, source: str | None, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        scaffold.plan(name, source, root=REPO)


def test_scaffold_from_a_user_function_allows_only_its_module(tmp_path: Path) -> None:
    root = clean_clone(tmp_path / "clone")
    plan = scaffold.plan("mine", "mypkg.train:train_func", root=root)
    texts = {p.relative_to(root).as_posix(): t for p, t in plan.files.items()}
    assert "def train" not in texts["trainables/mine.py"], "the user's loop stays in their package"
    assert "def load_model(" in texts["trainables/mine.py"]
    assert "loop: mypkg.train.train_func" in texts["conf/trainable/mine.yaml"]
    assert "allowed_targets: [mypkg.train]" in texts["conf/experiment/mine.yaml"]
    # its source cannot be read here: the metric names stay a guess, and say so
    assert "metrics: [val/loss, val/acc, epoch]  # a guess" in texts["conf/trainable/mine.yaml"]


LINEAR = "ray.train.examples.pytorch.torch_linear_example"


def test_scaffold_from_rays_linear_example_reads_its_metric_params_and_network(tmp_path: Path) -> None:
    loaded = LINEAR in sys.modules
    root = clean_clone(tmp_path / "clone")
    texts = {p.relative_to(root).as_posix(): t for p, t in scaffold.plan("linex", f"{LINEAR}:train_func",
                                                                         root=root).files.items()}
    trainable, experiment = texts["conf/trainable/linex.yaml"], texts["conf/experiment/linex.yaml"]
    assert f"allowed_targets: [{LINEAR}]" in experiment, "the narrowest entry: the function's module"
    assert "metrics: [loss]" in trainable and "  metric: loss" in experiment and "  mode: min" in experiment
    assert "  hidden_size: 1\n" in trainable and "  epochs: 3\n" in trainable  # the loop's own defaults
    assert "lr: {dist: loguniform" in texts["search_spaces/linex.yaml"]
    stub = texts["trainables/linex.py"]
    assert 'CHECKPOINT_FILE = "model.pt"' in stub and "return nn.Linear(1, hidden_size)" in stub
    assert loaded or LINEAR not in sys.modules, "reading the loop must not import it"


REGRESSION_STYLE = '''
import ray.train as train

def validate(model):
    loss = 0.0
    result = {"val/loss": loss}
    result["val/mae"] = loss
    return result

def train_func(config):
    for epoch in range(config.get("epochs", 2)):
        if train.get_context().get_world_rank() == 0:
            metrics = validate(None)
        else:
            metrics = {}
        metrics.update(epoch=epoch)
        train.report({**metrics, "train/loss": 1.0})

def helper_reports(config):
    log_epoch(1)

def log_epoch(epoch):
    ray.train.report(dict(loss=1.0, acc=0.5))
'''


@pytest.mark.parametrize(("module", "loop", "metrics"), [
    (LINEAR, "train_func", ["loss"]),  # result = dict(loss=loss); train.report(result, ...)
    ("ray.train.examples.pytorch.torch_regression_example", "train_func", ["loss"]),  # a helper returns it
    (None, "train_func", ["val/loss", "val/mae", "epoch", "train/loss"]),
    (None, "helper_reports", ["loss", "acc"]),  # reported in a function the loop calls
])
def test_metric_names_are_read_from_what_the_loop_reports(module: str | None, loop: str,
                                                          metrics: list[str]) -> None:
    from sweeps.config import loopsource

    source = loopsource.read(module) if module else REGRESSION_STYLE
    assert loopsource.reported_metrics(source, loop) == metrics


def test_contract_check_reads_a_package_with_an_unimportable_sibling_without_importing_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.config.contract import describe
    from sweeps.config.spec import TrainableCfg

    pkg = tmp_path / "boompkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "boom.py").write_text("raise RuntimeError('importing boompkg.boom')\n")
    (pkg / "broken.py").write_text("def (:\n")
    (pkg / "loop.py").write_text("from .helpers import resume_checkpoint\n\n\ndef train_func(config):\n"
                                 "    from boompkg import boom, broken  # noqa: F401\n")
    (pkg / "helpers.py").write_text("def resume_checkpoint(config):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def lines(loop: str) -> list[str]:
        return describe(TrainableCfg(name="b", loop=loop, builder=None, metrics=(), num_workers=1, use_gpu=False,
                                     resources_per_worker={}, placement_strategy="PACK", checkpoint_every=1,
                                     params={}))

    out = lines("boompkg.loop.train_func")
    assert not [m for m in sys.modules if m.startswith("boompkg")], "the check imported the user's package"
    assert any(line.startswith("yes resume") for line in out), out  # read from the sibling it imports
    assert any(line.startswith("?   source") and "could not read the source of boompkg.broken (SyntaxError" in line
               for line in out), out
    gone = lines("boompkg.nothere.train_func")
    assert gone[0].startswith("?   source       could not read the source of boompkg.nothere"), gone
    assert any(line.startswith("?   resume       not checked") for line in gone), gone
    example = lines(f"{LINEAR}.train_func")  # Ray's own package: its siblings (ray.workflow...) are not read
    assert any(line.startswith("NO  resume") for line in example), example
    assert any(line.startswith("yes checkpoints") for line in example), example


def test_new_from_rays_linear_example_writes_a_config_that_passes_its_own_checks(tmp_path: Path) -> None:
    """The first-time path of issue #33: the allowlist the scaffold writes is accepted by the security checks,
    and the contract check of a loop inside Ray's package prints lines instead of a traceback."""
    root = clean_clone(tmp_path / "clone")
    env = {**os.environ, "PYTHONPATH": str(root), "SWEEPS_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    env.pop("SWEEPS_CONF_DIR", None)
    made = subprocess.run([sys.executable, "-m", "sweeps", "new", "trainable", "linex", "--from",
                           f"{LINEAR}:train_func"], cwd=root, env=env, capture_output=True, text=True, timeout=110)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    assert f"added by security.allowed_targets and $SWEEPS_ALLOWED_TARGETS: {LINEAR}" in made.stdout
    assert "sweep          : linex (loss, min)" in made.stdout
    assert "NO  resume" in made.stdout and "yes checkpoints" in made.stdout and "yes promotion" in made.stdout


def test_a_report_without_the_sweep_metric_stops_every_trial_and_names_the_override() -> None:
    import ray.cloudpickle

    from sweeps.execution.run import firstreport, session

    session.start("s1")
    firstreport.arm()
    assert os.environ[firstreport.ENV] == "1", "Tune's own check (a traceback) is off: this one says more"
    budget: list[str] = []
    stop = firstreport.guarded("s1", lambda tid, r: budget.append(tid) or False, ("val/acc",), multi=False,
                               declared=("val/acc",))
    assert stop("t1", {"val/acc": 0.5, "training_iteration": 1}) is False and not stop.stop_all()
    lacking = {"loss": 0.3, "epoch": 0, "training_iteration": 1, "time_total_s": 1.0, "trial_id": "t2",
               "config": {"lr": 0.1}, "sweeps/nonfinite": 0.0, "sys/backend": "gloo"}
    assert stop("t2", lacking) is True, "the trial stops before any scheduler or searcher sees the result"
    assert stop.stop_all(), "and so does the whole sweep"
    assert budget == ["t1"]
    said = firstreport.problem("s1") or ""
    assert "the first report of trial t2 has no val/acc; the loop reported loss, epoch." in said, said
    assert "`sweep.metric=loss sweep.mode=min 'trainable.metrics=[loss,epoch]'`" in said, said
    restored = ray.cloudpickle.loads(ray.cloudpickle.dumps(stop))  # `sweeps resume` unpickles tuner.pkl
    assert restored.stop_all()
    session.start("s1")  # the resumed run's session: its own verdict, none yet
    assert not restored.stop_all() and firstreport.problem("s1") is None
    session.start("s2")
    other = firstreport.guarded("s2", lambda tid, r: False, ("val/acc",), multi=False)
    assert other("t9", lacking) and other.stop_all() and not restored.stop_all(), \
        "two sweeps in one process never share a verdict"


# -- Ray's own linear example, swept as it is (issue #33): one scaffold, shared by the slow tests below ----------
HELD_OUT = """    from ray.train.examples.pytorch.torch_linear_example import LinearDataset

    data = LinearDataset(2, 5, size=400)  # the example's own validation set: y = 2x + 5
    return data.x[:, None].numpy(), data.y.numpy()"""
TINY = ["sweep.num_samples=2", "trainable.params.epochs=2", "scheduler=fifo", "cluster.health_check_interval_s=0.1",
        "cluster.worker_start_timeout_s=60"]


def _sweeps(root: Path, env: SweepsEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeps", *args], cwd=root, env=env.env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def linex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, SweepsEnv]]:
    """A clean clone with ``new trainable linex --from`` Ray's linear example, and the one edit a user makes to
    the stub: held-out data for promotion. The example's ``train_func`` stays as Ray ships it."""
    tmp = tmp_path_factory.mktemp("linex")
    root = clean_clone(tmp / "clone")
    env = SweepsEnv(tmp / "run")
    env.env.pop("SWEEPS_CONF_DIR")
    env.env["PYTHONPATH"] = str(root)
    try:
        made = _sweeps(root, env, "new", "trainable", "linex", "--from", f"{LINEAR}:train_func")
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        stub = root / "trainables" / "linex.py"
        text = stub.read_text()
        todo = '    raise NotImplementedError("trainables/linex.py: return (inputs, targets) held out from training")'
        assert todo in text
        stub.write_text(text.replace(todo, HELD_OUT))
        yield root, env
    finally:
        env.cleanup()


def _record(env: SweepsEnv, ran: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The index record of the sweep ``ran`` printed the summary of (the module's tests share one SWEEPS_HOME)."""
    found = re.search(r"^sweep (\S+): ", ran.stdout, re.MULTILINE)
    assert found, ran.stdout[-3000:]
    rec: dict[str, Any] = json.loads((env.home / "sweeps" / f"{found.group(1)}.json").read_text())
    return rec


@pytest.mark.slow
def test_rays_linear_example_swept_reported_and_promoted_through_the_scaffolds_load_model(
        linex: tuple[Path, SweepsEnv]) -> None:
    """Ray's linear example, untouched, through `new trainable --from`: swept, reported, promoted with the
    scaffold's load_model. Why its own sweep: its trainable exists only in this module's clone."""
    root, env = linex
    ran = _sweeps(root, env, "run", "+experiment=linex", "sweep.metric=loss", "sweep.mode=min", *TINY)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    rec = _record(env, ran)
    assert rec["status"] == "finished" and rec["counts"]["completed"] == 2, rec["counts"]
    assert Path(str(rec["report_dir"]), "report.html").is_file() and "loss" in ran.stdout
    promoted = _sweeps(root, env, "promote", str(rec["sweep_id"]))
    assert promoted.returncode == 0, promoted.stdout[-3000:] + promoted.stderr[-3000:]
    c = mlflow_client(env.tracking_uri)
    version = c.get_model_version_by_alias("linex", "champion")
    trials = {r.info.run_id for r in c.search_runs([str(rec["mlflow_experiment_id"])])}
    assert version.run_id in trials, "the registered model is the sweep's best trial's, loaded by the stub"


@pytest.mark.slow
def test_a_sweep_whose_metric_the_loop_never_reports_stops_at_its_first_report(
        linex: tuple[Path, SweepsEnv]) -> None:
    """Its own sweep: it must end at the first report, so it cannot be the one that is reported and promoted.
    The trainable declares no metrics here (as when the scaffold could not read them), so the config check
    cannot refuse ``val/acc`` before the start; only the first real report shows it is missing."""
    root, env = linex
    ran = _sweeps(root, env, "run", "+experiment=linex", "trainable.metrics=[]", "sweep.metric=val/acc",
                  "sweep.mode=max", *TINY, "sweep.num_samples=3", "sweep.max_concurrent_trials=1",
                  "trainable.params.epochs=3")
    assert ran.returncode == 2, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "has no val/acc; the loop reported loss." in ran.stdout, ran.stdout[-3000:]
    assert "sweep.metric=loss sweep.mode=min" in ran.stdout, ran.stdout[-3000:]
    assert "Traceback" not in ran.stdout + ran.stderr
    rec = _record(env, ran)
    assert rec["status"] == "failed" and rec["stop_reason"] == "metric_missing", rec
    c = mlflow_client(env.tracking_uri)
    runs = c.search_runs([str(rec["mlflow_experiment_id"])])
    assert runs and all(r.info.status in ("FINISHED", "FAILED", "KILLED") for r in runs), \
        [(r.info.run_name, r.info.status) for r in runs]
    parent = next(r for r in runs if r.info.run_id == rec["parent_run_id"])
    assert parent.info.status == "FAILED" and "sweep.metric=loss" in parent.data.tags["error"]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == rec["parent_run_id"]]
    assert len(trials) == 1, "no trial started after the first report (one runs at a time, three planned)"
    assert len(c.get_metric_history(trials[0].info.run_id, "loss")) == 1, "stopped at its first report"
