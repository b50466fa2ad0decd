"""Composition of every experiment, the CLI surface, and the bad-input table (exit 2, key named, nothing
written). Runs the real CLI in-process: no Ray, no MLflow are started for rejected input."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.cli import main as cli_main
from sweeps.config import build as config_build
from sweeps.config import compose
from sweeps.config.compose import groups

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _isolated(sweeps_env) -> None:  # noqa: ANN001 - every test here runs in its own SWEEPS_HOME and cwd
    pass


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_validates(name: str) -> None:
    spec = config_build.build_spec(compose.compose([f"+experiment={name}"]))
    assert spec.sweep.name == name
    assert spec.sweep.metric in spec.trainable.metrics
    assert spec.space, "each experiment has a search space"


def test_the_trainables_declared_dataset_reaches_the_spec() -> None:
    spec = config_build.build_spec(compose.compose(["+experiment=quickstart"]))
    assert spec.trainable.dataset == ("sklearn-digits", "f6d9e39f")
    spec = config_build.build_spec(compose.compose(["+experiment=quickstart", "~trainable.dataset"]))
    assert spec.trainable.dataset is None


def test_issue_example_overrides_apply() -> None:
    spec = config_build.build_spec(compose.compose([
        "+experiment=digits_asha", "trainable.num_workers=2", "sweep.num_samples=12",
        "search_space.lr.high=0.3", "scheduler.max_t=10"]))
    assert spec.trainable.num_workers == 2 and spec.sweep.num_samples == 12
    assert spec.space["lr"]["high"] == 0.3 and spec.scheduler["max_t"] == 10
    assert spec.scheduler["_target_"] == "ray.tune.schedulers.ASHAScheduler"


def test_help_lists_subcommands_and_groups(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("run", "resume", "report", "promote", "schedule", "ui", "doctor"):
        assert cmd in out
    assert cli_main.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    for group, options in groups().items():
        assert group in out and all(o in out for o in options)


def test_cfg_job_prints_composed_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run", "+experiment=quickstart", "sweep.seed=7", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert "seed: 7" in out and "name: quickstart" in out and "ASHAScheduler" in out


def test_dry_run_prints_plan_and_starts_nothing(capsys: pytest.CaptureFixture[str], sweeps_env) -> None:  # noqa: ANN001
    assert cli_main.main(["run", "+experiment=digits_asha", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "concurrent     : 2 trial(s)" in out and "total trials   : 12" in out
    assert "CPU=3" in out and "lr:" in out and "max epochs     : 10" in out
    assert not sweeps_env.home.exists(), "a dry run must not write anything"


def test_dry_run_grid_counts_grid_points(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run", "+experiment=digits_grid", "sweep.num_samples=2", "--dry-run"]) == 0
    assert "total trials   : 12" in capsys.readouterr().out  # 3 lr x 2 hidden x 2 repeats


def test_dry_run_takes_a_mapping_override_as_a_run_does(capsys: pytest.CaptureFixture[str]) -> None:
    """`key={...}` replaces an empty mapping of the config (the run's composition does it); the dry run's
    config-files listing composes the same way (it once failed with Hydra's 'Key GPU is not in struct')."""
    argv = ["run", "+experiment=quickstart", "cluster.num_gpus=1", "cluster.driver_resources={GPU: 1}", "--dry-run"]
    assert cli_main.main(argv) == 0
    assert "cluster: local <- " in capsys.readouterr().out


# (overrides, the text the message must contain)
BAD = [
    (["+experiment=nope"], "experiment: unknown option 'nope'; available experiment options: "),
    (["trainable=resnet"], "trainable: unknown option 'resnet'; available trainable options: "),
    (["search_space=none"], "search_space: unknown option"),
    (["searcher=bayes"], "searcher: unknown option 'bayes'; available searcher options: grid, hyperopt, nsga2, optuna"),
    (["scheduler=ash"], "scheduler: unknown option 'ash'; available scheduler options: asha"),
    (["sweep.nm_samples=3"], "sweep.nm_samples: no such config key; did you mean sweep.num_samples"),
    (["sweep.num_samples=[1"], "malformed override"),
    (["justaword"], "malformed override 'justaword'"),
    (["+search_space.lr.dist=gauss", "search_space={}"], "search_space"),
    (["search_space.lr.dist=gaussian"], "search_space.lr.dist: unknown distribution 'gaussian'"),
    (["search_space.lr.low=0.5", "search_space.lr.high=0.1"], "search_space.lr: low (0.5) must be < high (0.1)"),
    (["search_space.lr.low=0"], "search_space.lr.low: loguniform needs low > 0"),
    (["search_space.hidden_size.values=[]"], "search_space.hidden_size.values: needs a non-empty list"),
    (["search_space.lr.low=abc"], "search_space.lr.low: must be a finite number"),
    (["sweep.num_samples=0"], "sweep.num_samples: must be >= 1"),
    (["sweep.num_samples=-2"], "sweep.num_samples: must be >= 1"),
    (["sweep.num_samples=-1"], "sweep.num_samples: -1 (unbounded) needs sweep.time_budget_s"),
    (["sweep.max_concurrent_trials=-1"], "sweep.max_concurrent_trials: must be >= 0"),
    (["sweep.mode=maximize"], "sweep.mode: 'maximize' is not allowed; choose one of min, max"),
    (["sweep.metric=val/f1"], "sweep.metric: 'val/f1' is not reported by trainable 'digits'"),
    (["sweep.metric=bad..name", "trainable.metrics=[bad..name]"], "not a valid MLflow metric/param name"),
    (["searcher=optuna", "sweep.metric=null"], "sweep.metric: required"),
    (["trainable.resources_per_worker.CPU=64", "cluster.num_cpus=4"], "trainable.resources_per_worker"),
    (["trainable.num_workers=-1"], "trainable.num_workers: must be >= 0"),
    (["trainable.in_process=maybe"], "trainable.in_process: 'maybe' is not allowed; choose one of auto, true, false"),
    (["trainable.num_workers=2", "trainable.in_process=true"], "trainable.in_process: true needs a single-process"),
    (["trainable.num_workers=0", "trainable.in_process=false"], "trainable.in_process: false with"),
    (["scheduler=asha", "scheduler.grace_period=20", "scheduler.max_t=10"],
     "scheduler.grace_period (20) must be <= scheduler.max_t (10)"),
    (["scheduler=asha", "scheduler.grace_period=0"], "scheduler.grace_period: must be > 0"),
    (["scheduler=asha", "scheduler.reduction_factor=1"], "scheduler.reduction_factor: must be > 1"),
    (["scheduler=asha", "scheduler.time_attr=val/acc"], "scheduler.time_attr: 'val/acc' is not a monotonic"),
    (["scheduler=pbt"], "scheduler.hyperparam_mutations: PBT needs at least one mutation"),
    (["+experiment=digits_pbt", "scheduler.quantile_fraction=0.7"],
     "scheduler.quantile_fraction: must be within [0, 0.5]"),
    (["+experiment=digits_pbt", "scheduler.perturbation_interval=0"],
     "scheduler.perturbation_interval: must be > 0"),
    (["+experiment=digits_pbt", "trainable.checkpoint_every=0"], "PBT needs checkpoints"),
    (["+experiment=digits_pbt", "trainable.checkpoint_every=3"],
     "trainable.checkpoint_every (3) must divide scheduler.perturbation_interval (2)"),
    (["tracking.uri=ftp://example"], "tracking.uri: 'ftp://example' has no supported scheme"),
    (["+searcher.sampler._target_=os.system"], "target 'os.system' is outside the allowed packages"),
    (["trainable.loop=subprocess.call"], "trainable.loop: 'subprocess.call' is outside the allowed packages"),
    (["trainable.load_model=pickle.loads"], "trainable.load_model: 'pickle.loads' is outside the allowed packages"),
    (["searcher=grid", "search_space=digits"], "searcher=grid: parameters lr, weight_decay are continuous"),
    (["searcher=optuna", "search_space=digits_grid"], "dist=grid is only for searcher=random|grid"),
    (["promote.model_name=../evil"], "promote.model_name: '../evil' looks like a path"),
    (["checkpoint.num_to_keep=0"], "checkpoint.num_to_keep: must be >= 1"),
    (["+scheduler.grace_perod=3"],
     "scheduler.grace_perod: FIFOScheduler takes no argument 'grace_perod'; its arguments: (none)"),
    (["searcher=optuna", "+searcher.sampler.n_startup=3"], "searcher.sampler.n_startup: TPESampler takes no"),
    (["cluster.mode=k8s"], "cluster.mode: 'k8s' is not allowed; choose one of local, remote"),
    (["~trainable.dataset.digest"], "trainable.dataset: got {'name': 'sklearn-digits'}; give both name and digest"),
    (["trainable.dataset=digits"], "trainable.dataset: must be a mapping, got 'digits'"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_exits_2_names_key_and_writes_nothing(
    overrides: list[str], needle: str, capsys: pytest.CaptureFixture[str], sweeps_env  # noqa: ANN001
) -> None:
    rc = cli_main.main(["run", *overrides])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err, err
    assert not sweeps_env.home.exists(), "rejected input must not touch MLflow, storage or the index"
    assert not (sweeps_env.root / "reports").exists()


def test_several_errors_are_reported_together(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main.main(["run", "sweep.num_samples=0", "sweep.mode=up", "search_space.lr.low=-1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "3 problems" in err
    assert "sweep.num_samples" in err and "sweep.mode" in err and "search_space.lr.low" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["reprot", "latest"], "did you mean report"),
        (["report", "no-such-sweep"], "SWEEP_ID: no sweep 'no-such-sweep'"),
        (["resume", "latest"], "no sweeps yet"),
        (["run", "--bogus"], "unknown flag '--bogus'"),
    ],
)
def test_cli_misuse(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_missing_required_argument_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["promote"])
    assert exc.value.code == 2
    assert "SWEEP_ID" in capsys.readouterr().err
