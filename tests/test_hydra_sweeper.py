"""The Hydra sweeper's pure parts: Hydra sweep syntax -> search space (one table), the sweeps overrides and the
composed spec, config groups composed with Hydra's own loader, and the trials' shim (the task's return value as
the metric when it reported nothing), all without Ray. The real sweep is in tests/test_hydra_sweeper_slow.py."""

from __future__ import annotations

import json
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.sweeps_sweeper import job, pipeline, space
from sweeps.config import space as sweeps_space
from sweeps.errors import BadInput
from trainables import hydra_task

REPO = Path(__file__).resolve().parent.parent


def _plan(*overrides: str, groups: tuple[str, ...] = (), discrete: bool = False) -> space.SpacePlan:
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return space.plan(parsed, lambda o: o.key_or_group in groups, discrete=discrete)


@pytest.mark.parametrize(
    ("override", "name", "entry"),
    [
        ("lr=tag(log, interval(1e-4, 1e-1))", "lr", {"dist": "loguniform", "low": 1e-4, "high": 0.1}),
        ("lr=interval(0, 1)", "lr", {"dist": "uniform", "low": 0.0, "high": 1.0}),
        ("n=tag(int, interval(1, 8))", "n", {"dist": "randint", "low": 1, "high": 9}),
        ("n=tag(int, log, interval(1, 64))", "n", {"dist": "lograndint", "low": 1, "high": 65}),
        ("h=16,32,64", "h", {"dist": "choice", "values": [16, 32, 64]}),
        ("h=choice(16, 32)", "h", {"dist": "choice", "values": [16, 32]}),
        ("act=choice(relu, tanh)", "act", {"dist": "choice", "values": ["relu", "tanh"]}),
        ("n=range(1, 5)", "n", {"dist": "randint", "low": 1, "high": 5}),
        ("n=tag(log, range(1, 65))", "n", {"dist": "lograndint", "low": 1, "high": 65}),
        ("n=range(0, 10, 2)", "n", {"dist": "choice", "values": [0, 2, 4, 6, 8]}),
        ("f=range(0.5, 2.0, 0.5)", "f", {"dist": "choice", "values": [0.5, 1.0, 1.5]}),
        ("n=shuffle(range(3))", "n", {"dist": "choice", "values": [0, 1, 2]}),
        ("+extra=interval(0, 1)", "extra", {"dist": "uniform", "low": 0.0, "high": 1.0}),
        ("model.lr=interval(0.1, 0.2)", "model.lr", {"dist": "uniform", "low": 0.1, "high": 0.2}),
    ],
)
def test_sweep_syntax_maps_to_the_search_space(override: str, name: str, entry: dict[str, Any]) -> None:
    plan = _plan(override)
    assert plan.space == {name: entry}
    assert plan.fixed == [] and plan.groups == []
    assert sweeps_space.validate_space(plan.space) == []
    domain = sweeps_space.to_domain(entry)
    sample = domain.sample()
    assert sample in entry["values"] if entry["dist"] == "choice" else entry["low"] <= sample < entry["high"]


def test_grid_enumerates_ranges_and_probes_take_a_value_in_range() -> None:
    plan = _plan("n=range(1, 4)", "+extra=tag(log, interval(0.01, 1))", "h=8,16", discrete=True)
    assert plan.space["n"] == {"dist": "choice", "values": [1, 2, 3]}
    assert plan.probes == ["n=1", "+extra=0.01", "h=8"]


def test_fixed_overrides_stay_fixed_and_the_last_one_for_a_key_wins() -> None:
    plan = _plan("lr=interval(0, 1)", "epochs=3", "~aux", "lr=0.5,0.7", "model=small,large", groups=("model",))
    assert plan.fixed == ["epochs=3", "~aux"]
    assert plan.space["lr"] == {"dist": "choice", "values": [0.5, 0.7]}
    assert plan.groups == ["model"] and plan.space["model"] == {"dist": "choice", "values": ["small", "large"]}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("n=range(5, 1)", "holds no value"),
        ("n=tag(int, interval(0.5, 3))", "whole-number ends"),
    ],
)
def test_sweeps_it_cannot_map_are_refused_by_name(override: str, needle: str) -> None:
    with pytest.raises(space.SweepSyntaxError, match=needle):
        _plan(override)


# -- the sweeps side: options -> overrides -> the composed, validated spec (no Ray) ------------------------------
def test_options_become_sweeps_overrides_and_compose_with_the_app_trainable(sweeps_env) -> None:  # noqa: ANN001
    options = {"num_samples": 4, "metric": "val/loss", "mode": "min", "scheduler": "asha", "num_workers": 1,
               "max_concurrent_trials": 2, "epochs": 3, "searcher": None}
    overrides = pipeline.sweeps_overrides(options, "train", "/tmp/it's here", ["scheduler.grace_period=1"])
    assert "sweep.metric='val/loss'" in overrides and "scheduler=asha" in overrides
    assert "report.dir='/tmp/it\\'s here'" in overrides and not any(o.startswith("searcher") for o in overrides)
    spec = pipeline.prepare(overrides, _plan("model.lr=tag(log, interval(1e-4, 1e-1))").space)
    assert spec.trainable.loop == "trainables.hydra_task.train_loop" and spec.trainable.num_workers == 1
    assert spec.space == {"model.lr": {"dist": "loguniform", "low": 1e-4, "high": 0.1}}
    assert (spec.sweep.name, spec.sweep.metric, spec.sweep.mode, spec.sweep.num_samples) == ("train", "val/loss",
                                                                                             "min", 4)
    assert spec.scheduler["max_t"] == 3 and spec.scheduler["grace_period"] == 1
    assert spec.report.dir == "/tmp/it's here"


def test_a_halving_scheduler_without_an_epoch_budget_is_refused(sweeps_env) -> None:  # noqa: ANN001
    overrides = pipeline.sweeps_overrides({"scheduler": "asha"}, "train", "/tmp/r", [])
    with pytest.raises(BadInput, match="hydra.sweeper.epochs"):
        pipeline.prepare(overrides, {"lr": {"dist": "uniform", "low": 0.0, "high": 1.0}})


@pytest.mark.parametrize("extra", ["search_space.lr.high=1", "trainable=digits", "trainable.loop=trainables.x.y",
                                   "cluster=remote", "+search_space.x={dist: uniform}"])
def test_extra_overrides_may_not_replace_the_space_the_app_or_the_cluster(extra: str) -> None:
    with pytest.raises(BadInput, match="cannot be set here"):
        pipeline.sweeps_overrides({}, "train", "/tmp/r", [extra])


@pytest.mark.parametrize(
    ("options", "app", "expected"),
    [
        ({"scheduler": "asha"}, "epochs: 5\nlr: 0.1\n", 5),
        ({"scheduler": "asha", "epochs": 3}, "epochs: 5\n", 3),
        ({"scheduler": "asha"}, "trainer: {epochs: 5}\n", None),
        ({"scheduler": "median"}, "epochs: true\n", None),
        ({}, "epochs: 5\n", None),  # FIFO: a task may report once, whatever its epochs
        ({"scheduler": "fifo", "epochs": 2}, "epochs: 5\n", 2),
    ],
)
def test_the_report_budget_is_the_apps_epochs_only_under_an_early_stopping_scheduler(options: dict[str, Any],
                                                                                     app: str, expected: Any) -> None:
    assert pipeline.epochs(options, app) == expected


def test_the_plugin_is_registered_and_shipped() -> None:
    import tomllib

    from hydra.core.config_store import ConfigStore
    from setuptools import find_namespace_packages

    import hydra_plugins.sweeps_sweeper.config  # noqa: F401 - registers the config

    node = ConfigStore.instance().load("hydra/sweeper/sweeps.yaml").node
    assert node["_target_"] == "hydra_plugins.sweeps_sweeper.sweeper.SweepsSweeper"
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    found = find_namespace_packages(str(REPO), include=include)
    assert "hydra_plugins.sweeps_sweeper" in found
    assert not (REPO / "hydra_plugins" / "__init__.py").exists(), "hydra_plugins is a namespace package"


# -- config groups: composed with Hydra's own loader, one base config per option ---------------------------------
def _hydra_app(tmp_path: Path) -> tuple[Any, Any]:
    """A Hydra config loader and master config for a conf folder with a `model` group."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "config.yaml").write_text("defaults:\n  - model: small\n  - _self_\nlr: 0.1\nepochs: 2\n")
    (conf / "model" / "small.yaml").write_text("hidden: 8\n")
    (conf / "model" / "large.yaml").write_text("hidden: 64\n")
    GlobalHydra.instance().clear()
    ctx = initialize_config_dir(config_dir=str(conf), version_base="1.3", job_name="app")
    ctx.__enter__()
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", ["hydra.sweep.dir=" + str(tmp_path / "multi")], RunMode.MULTIRUN)
    return loader, master


def test_group_options_get_a_base_config_each_and_the_trial_config_is_rebuilt(tmp_path: Path) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext

    from hydra_plugins.sweeps_sweeper.sweeper import SweepsSweeper

    loader, master = _hydra_app(tmp_path)
    try:
        sweeper = SweepsSweeper()
        sweeper.setup(hydra_context=HydraContext(config_loader=loader, callbacks=None),  # type: ignore[arg-type]
                      task_function=lambda cfg: None, config=master)
        plan = sweeper._plan(["model=small,large", "lr=interval(0.01, 0.1)", "+note=choice(a, b)", "epochs=3"])
        assert plan.groups == ["model"] and plan.fixed == ["epochs=3"]
        bases = job.compose_bases(loader, master, plan)
        path = job.write(tmp_path / "multi", {"module": "m", "qualname": "f", "line": 1}, plan, bases, "loss")
    finally:
        GlobalHydra.instance().clear()
    loaded = hydra_task.load_job(str(path))
    config = {"model": "large", "lr": 0.05, "note": "b", "_trial_id": "abc_00003"}
    cfg = hydra_task.job_config(loaded, config)
    assert (cfg.model.hidden, cfg.lr, cfg.note, cfg.epochs) == (64, 0.05, "b", 3)
    task_cfg, out = hydra_task.enter_job(cfg, "abc_00003", hydra_task.trial_overrides(loaded, config))
    from hydra.core.hydra_config import HydraConfig

    assert "hydra" not in task_cfg and task_cfg.model.hidden == 64
    assert Path(out) == (tmp_path / "multi" / "3").resolve()
    assert HydraConfig.get().runtime.choices.model == "large" and HydraConfig.get().job.num == 3
    assert list(HydraConfig.get().overrides.task) == ["epochs=3", "model=large", "lr=0.05", "note=b"]


def test_a_key_the_app_cannot_take_fails_before_anything_runs(tmp_path: Path) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException

    loader, master = _hydra_app(tmp_path)
    try:
        plan = _plan("lrr=interval(0.01, 0.1)")
        with pytest.raises(ConfigCompositionException, match="lrr"):
            job.compose_bases(loader, master, plan)
    finally:
        GlobalHydra.instance().clear()


# -- the trials' shim ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "reported", "rank", "expected"),
    [
        (0.25, False, 0, {"loss": 0.25}),
        (3, False, 0, {"loss": 3.0}),
        ({"loss": 0.5, "acc": 0.9}, False, 0, {"loss": 0.5, "acc": 0.9}),
        (0.25, True, 0, None),  # it reported: the return value is ignored
        (None, True, 0, None),
        (None, False, 1, {}),  # another rank joins the report's barrier
    ],
)
def test_the_return_value_is_the_metric_only_when_nothing_was_reported(value: Any, reported: bool, rank: int,
                                                                      expected: Any) -> None:
    assert hydra_task.final_metrics(value, "loss", reported, rank) == expected


@pytest.mark.parametrize(("value", "needle"), [(None, "returned None"), ("0.1", "returned '0.1'"),
                                               (True, "returned True"), ({"acc": 1.0}, "without the sweep metric")])
def test_a_task_that_reports_nothing_must_return_the_metric(value: Any, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        hydra_task.final_metrics(value, "loss", reported=False)


def test_reports_are_counted_whichever_way_the_app_imported_report() -> None:
    sent: list[dict[str, Any]] = []
    fake = types.SimpleNamespace(report=lambda metrics, checkpoint=None: sent.append(metrics))
    hydra_task.install_counter(fake)
    hydra_task.install_counter(fake)  # once per process, however often the loop starts
    report = fake.report  # what `from ray.train import report` in the app binds

    def reports_each_epoch(cfg: Any) -> float:
        for epoch in range(cfg["epochs"]):
            report({"loss": 1.0 / (epoch + 1)})
        return 123.0

    assert hydra_task.call_task(reports_each_epoch, {"epochs": 2}, "loss") is None
    assert hydra_task.call_task(lambda cfg: 0.5, {}, "loss") == {"loss": 0.5}
    assert sent == [{"loss": 1.0}, {"loss": 0.5}]


def test_the_task_is_found_under_hydra_main_and_the_job_env_is_required(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_app.py").write_text(textwrap.dedent("""
        import functools
        import hydra

        def logged(fn):
            @functools.wraps(fn)
            def inner(cfg):
                return fn(cfg)
            return inner

        @hydra.main(version_base="1.3", config_path=None)
        @logged
        def main(cfg):
            return cfg["x"] * 2
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_app  # type: ignore[import-not-found]

    ref, root = job.task_ref(my_app.main.__wrapped__.__wrapped__)
    assert ref["module"] == "my_app" and ref["qualname"] == "main" and root == str(tmp_path)
    task = hydra_task.import_task(ref)
    assert task({"x": 2}) == 4 and not hasattr(task, "__wrapped__")
    sys.modules.pop("my_app", None)
    monkeypatch.delenv(hydra_task.JOB_ENV, raising=False)
    with pytest.raises(RuntimeError, match=hydra_task.JOB_ENV):
        hydra_task.load_job()
    assert json.loads(json.dumps(ref)) == ref
