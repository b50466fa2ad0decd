"""The typed reader of a stored sweep (``sweeps.config.stored``): records of every shape, old ones included, read
into the values the later stages use, and the same values the validator gave when the sweep ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sweeps import store
from sweeps.config import stored
from sweeps.config.spec import BudgetCfg, Constraint, Objective, PromoteCfg, ReportCfg

MULTI = {"metric": "val/acc", "mode": "max",
         "objectives": [{"metric": "model/params", "mode": "min"}, {"metric": "val/acc", "mode": "max"}],
         "constraints": {"model/params": "<= 5000", "time/epoch_s": "< 2.5e1"}}
NEW = {
    "sweep": MULTI,
    "search_space": {"lr": {"dist": "loguniform", "low": 1e-4, "high": 1e-1}},
    "trainable": {"name": "digits", "loop": "trainables.digits.train_loop", "builder": "trainables.digits.build_model",
                  "load_model": "trainables.digits.load_model", "num_workers": 2, "use_gpu": True,
                  "resources_per_worker": {"CPU": 2, "GPU": 0.5}, "params": {"epochs": 6, "lr": 0.1}},
    "cluster": {"driver_cpus": 0.5},
    "report": {"enabled": True, "dir": "out/reports", "top_k": 2},
    "promote": {"enabled": False, "model_name": "digits", "alias": "prod", "require_confirmed": True,
                "rule": "cheapest_within:1"},
    "security": {"allowed_targets": ["mypkg"]},
    "notify": {"webhook_url": "***"},  # redacted in the record: set, value unknown
}
OLD = {  # a record of an older version: no report/promote/notify/security, one objective, no per_trial kept
    "sweep": {"metric": "val/loss", "mode": "min"},
    "trainable": {"name": "old", "builder": "trainables.digits.build_model", "num_workers": 4,
                  "params": {"epochs": True}},
}

CASES = [
    # (what, config, record fields, attribute -> expected)
    ("new: objectives primary first, constraints parsed by the validator's rule", NEW, {},
     {"metric": "val/acc", "mode": "max", "multi": True,
      "objectives": (Objective("val/acc", "max"), Objective("model/params", "min")),
      "constraints": (Constraint("model/params", "<=", 5000.0), Constraint("time/epoch_s", "<", 25.0))}),
    ("no sweep.mode: the primary still comes first", {"sweep": {k: v for k, v in MULTI.items() if k != "mode"}},
     {"mode": "max"}, {"objectives": (Objective("val/acc", "max"), Objective("model/params", "min"))}),
    ("new: outputs and promotion", NEW, {},
     {"report": ReportCfg(True, "out/reports", 2), "allowed_targets": ("mypkg",), "webhook_set": True,
      "promote": PromoteCfg(False, "digits", "prod", require_confirmed=True, rule="cheapest_within:1")}),
    ("new: the trainable", NEW, {},
     {"epochs": 6, "space": NEW["search_space"], "trainable.name": "digits",
      "trainable.loader": ("trainable.load_model", "trainables.digits.load_model"),
      "trainable.params": {"epochs": 6, "lr": 0.1}}),
    ("new: resources from the record's per_trial", NEW, {"per_trial": {"CPU": 3.0, "GPU": 1.0, "driver_slot": 1}},
     {"cpus_per_trial": 3.0, "gpus_per_trial": 1.0}),
    ("new: resources by the old formula without per_trial", NEW, {},
     {"cpus_per_trial": 0.5 + 2 * 2, "gpus_per_trial": 2 * 0.5}),
    ("new: the record's metric and mode come first", NEW, {"metric": "val/f1", "mode": "min"},
     {"metric": "val/f1", "mode": "min"}),
    ("old: missing sections read as the validator's defaults", OLD, {},
     {"report": ReportCfg(True, "reports", 5), "promote": PromoteCfg(False, None, "champion"),
      "allowed_targets": (), "webhook_set": False, "budget": BudgetCfg(), "space": {}}),
    ("old: a single objective has no front", OLD, {},
     {"metric": "val/loss", "mode": "min", "objectives": (), "constraints": (), "multi": False}),
    ("old: builder-only loader, epochs not an int, 1 CPU per worker + 1 for the driver", OLD, {},
     {"trainable.loader": ("trainable.builder", "trainables.digits.build_model"), "epochs": None,
      "cpus_per_trial": 1 + 4 * 1.0, "gpus_per_trial": 0.0}),
    ("empty: an index record with no config", {}, {},
     {"metric": "", "mode": "max", "trainable.loader": None, "trainable.name": None, "epochs": None,
      "cpus_per_trial": 2.0, "gpus_per_trial": 0.0}),
    ("absent: a record whose config is null", None, {}, {"metric": "", "report": ReportCfg(True, "reports", 5)}),
]


def record(config: Any, **kw: Any) -> store.SweepRecord:
    base: dict[str, Any] = dict(sweep_id="s", experiment="e", created=0.0, status="finished", storage_path="/x",
                                experiment_dirs=["/x/s"], tracking_uri="sqlite:///x.db", config=config)
    return store.SweepRecord(**{**base, **kw})


def value(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("what", "config", "fields", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_stored_sweep_reads_into_typed_values(what: str, config: Any, fields: dict[str, Any],
                                                expected: dict[str, Any]) -> None:
    sweep = stored.of(record(config, **fields))
    got = {k: value(sweep, k) for k in expected}
    assert got == expected, what


def test_reading_leaves_the_record_as_it_was() -> None:
    config = {**NEW, "trainable": dict(NEW["trainable"])}
    sweep = stored.read(config)
    assert config == {**NEW, "trainable": NEW["trainable"]}
    with pytest.raises(AttributeError):
        sweep.metric = "x"  # type: ignore[misc]


EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "conf" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_reader_gives_what_the_validator_gave(experiment: str, sweeps_env: Any) -> None:
    """Every bundled experiment, stored as a run stores it, reads back as its validated spec."""
    from sweeps.config import compose
    from sweeps.config.build import build_spec
    from sweeps.execution.resources.plan import in_process, per_trial

    spec = build_spec(compose.compose([f"+experiment={experiment}"]))
    sweep = stored.read(spec.redacted(), metric=spec.sweep.metric, mode=spec.sweep.mode, per_trial=per_trial(spec))
    multi = spec.sweep.multi
    assert (sweep.metric, sweep.mode, sweep.epochs) == (spec.sweep.metric, spec.sweep.mode, spec.trainable.epochs)
    assert sweep.objectives == (spec.sweep.objectives if multi else ())
    assert sweep.constraints == (spec.sweep.constraints if multi else ())
    assert (sweep.report, sweep.promote, sweep.budget) == (spec.report, spec.promote, spec.sweep.budget)
    assert sweep.allowed_targets == spec.allowed_targets and sweep.space == spec.raw["search_space"]
    t = sweep.trainable
    assert (t.name, t.loop, t.builder, t.load_model, t.params) == (
        spec.trainable.name, spec.trainable.loop, spec.trainable.builder, spec.trainable.load_model,
        spec.trainable.params)
    assert (sweep.cpus_per_trial, sweep.gpus_per_trial) == stored.cpus_gpus(per_trial(spec))
    if not spec.trainable.datasets and not spec.cluster.driver_resources and not in_process(spec):
        # what the old formula knew (a record before trials ran in their own process)
        old = stored.read(spec.redacted())
        assert (old.cpus_per_trial, old.gpus_per_trial) == (sweep.cpus_per_trial, sweep.gpus_per_trial)
