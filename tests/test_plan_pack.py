"""The resource plan's two ends of scale, fast: packed single-worker trials (``trainable.pack``: K trials per GPU,
each worker capped at 1/K of its memory) and the head's memory on a cluster (Train's per-run placement-group
cleaner, ``cluster.head_memory_per_trial_mb``). Pure functions on synthetic snapshots, and the CLI's dry run."""

from __future__ import annotations

import types
from typing import Any

import pytest

from sweeps.cli import main as cli_main
from sweeps.config.sections.trainable import pack_params
from sweeps.config.spec import PACK_KEY
from sweeps.errors import BadInput
from sweeps.execution.resources import plan
from sweeps.ops.prepare import dry_run, prepare

QUICK = ["+experiment=quickstart", "sweep.max_concurrent_trials=0", "sweep.num_samples=40"]
PACKED = ["trainable.use_gpu=true", "trainable.num_workers=1"]
GIB = 1024 ** 3


@pytest.fixture(autouse=True)
def _isolated(sweeps_env) -> None:  # noqa: ANN001 - every test here runs in its own SWEEPS_HOME and cwd
    pass


def _spec(*overrides: str) -> Any:
    return prepare([*QUICK, *overrides])


# (overrides, what the refusal must say)
REFUSED = [
    (["trainable.pack=0"], "trainable.pack: must be an integer >= 1"),
    (["trainable.use_gpu=true", "trainable.num_workers=2", "trainable.pack=2"],
     "trainable.pack: 2 is refused for multi-worker trials (trainable.num_workers is 2)"),
    (["trainable.num_workers=1", "trainable.pack=2"], "trainable.pack: 2 packs trials onto GPUs, but "
                                                      "trainable.use_gpu is false"),
    ([*PACKED, "trainable.pack=2", "+trainable.resources_per_worker.GPU=1"],
     "trainable.pack: 2 gives each worker GPU=0.5, but trainable.resources_per_worker.GPU is set to 1"),
    (["cluster.head_memory_per_trial_mb=-1"], "cluster.head_memory_per_trial_mb: must be >= 0"),
]


@pytest.mark.parametrize(("overrides", "needle"), REFUSED)
def test_a_pack_that_cannot_hold_is_refused_naming_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(BadInput) as exc:
        _spec(*overrides)
    assert needle in str(exc.value)


@pytest.mark.parametrize(("pack", "gpus", "trials"), [(4, 2, 8), (3, 1, 3), (2, 1, 2), (10, 1, 10)])
def test_k_packed_trials_run_per_gpu(pack: int, gpus: int, trials: int) -> None:
    """Each worker asks GPU 1/K, so K x GPUs trials run at once (3 x 1/3 and 10 x 0.1 fill one GPU)."""
    spec = _spec(*PACKED, f"trainable.pack={pack}", f"cluster.num_gpus={gpus}", "cluster.num_cpus=64")
    assert plan.worker_bundle(spec) == {"CPU": 1.0, "GPU": pytest.approx(1 / pack)}
    made = plan.make_plan(spec, plan.local_resources(spec), local=True)
    assert made.concurrent_trials == trials
    assert made.resources.total[plan.TRIAL_SLOT] == trials
    assert f"packing        : {pack} trials per GPU, each capped at {100 / pack:.0f}% of its memory" in made.describe()


def test_a_packed_trials_worker_asks_train_for_its_share() -> None:
    """What the Train worker group is made with (the trial's setup), not only what the plan counts."""
    from sweeps.execution.tuning.tuner import trial_setup

    setup = trial_setup(_spec(*PACKED, "trainable.pack=4", "cluster.num_gpus=1"), "s1")
    assert setup.use_gpu and setup.num_workers == 1 and setup.resources_per_worker == {"CPU": 1, "GPU": 0.25}


def test_a_packed_trial_in_its_own_process_asks_its_share_itself() -> None:
    from sweeps.execution.tuning.tuner import trainable

    spec = _spec("trainable.use_gpu=true", "trainable.num_workers=0", "trainable.pack=4", "cluster.num_gpus=1")
    assert plan.in_process(spec) and plan.per_trial(spec) == {"CPU": 1.0, "GPU": 0.25}
    resources = trainable(spec, "s1").__dict__.get("_resources") or {}
    held = {k: v for k, v in getattr(resources, "required_resources", resources).items() if v}
    assert held == {"CPU": 1.0, "GPU": 0.25, plan.TRIAL_SLOT: 1.0}


def test_the_worker_gets_the_pack_and_the_sweep_records_it() -> None:
    spec = _spec(*PACKED, "trainable.pack=4", "cluster.num_gpus=1")
    assert spec.trainable.loop_extras("val/loss")[PACK_KEY] == 4
    assert pack_params(spec.trainable) == {"pack": 4, "gpu_memory_fraction": 0.25}
    unpacked = _spec(*PACKED, "cluster.num_gpus=1").trainable
    assert PACK_KEY not in unpacked.loop_extras("val/loss") and pack_params(unpacked) == {}


def test_a_packed_worker_caps_its_cuda_memory_once_before_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from sweeps.execution.train import bridge

    capped: list[tuple[float, int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: capped.append((f, d)))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=80 * GIB))
    assert bridge.cap_gpu_memory(1) is None and not capped
    assert bridge.cap_gpu_memory(4) == 0.25 and capped == [(0.25, 0)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bridge.cap_gpu_memory(4) is None and len(capped) == 1


def test_without_a_gpu_the_dry_run_plans_for_one_and_a_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "_visible_gpus", lambda: 0.0)
    spec = _spec(*PACKED, "trainable.pack=2")
    text = dry_run(spec)
    assert "GPUs           : planned for 1: this machine shows none (a run here is refused" in text, text
    assert "GPU=1, " in text.split("cluster        : ")[1].splitlines()[0]
    with pytest.raises(BadInput, match=r"^trainable.use_gpu: true, but the embedded Ray would have no GPU"):
        plan.make_plan(spec, plan.local_resources(spec), local=True)


GPU_COUNT = """
import json, sys
from sweeps.execution.resources import plan
plan.GPU_DEVICE_NODES = tuple(sys.argv[1:])
print(json.dumps([plan._visible_gpus(), "torch" in sys.modules]))
"""


@pytest.mark.parametrize(("nodes", "asks_torch"), [((), False), (("/dev/null",), True)])
def test_the_gpu_count_imports_torch_only_where_a_gpu_device_node_exists(nodes: tuple[str, ...],
                                                                         asks_torch: bool) -> None:
    """A CPU-only machine plans 0 GPUs without importing torch (~1.5 s of every driver's start); where a GPU
    driver's device node exists, torch counts them (this machine has none, so a stand-in node: torch says 0)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", GPU_COUNT, *nodes], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [0.0, asks_torch]


def test_the_cli_dry_run_shows_the_packing_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "+experiment=quickstart", "trainable.use_gpu=true", "trainable.num_workers=1", "trainable.pack=2",
            "--dry-run"]
    assert cli_main.main(argv) == 0
    out = capsys.readouterr().out
    assert "packing        : 2 trials per GPU, each capped at 50% of its memory" in out
    assert "GPU=0.5" in out


def _cluster(head_gib: float | None, gpus: float = 8.0) -> plan.Resources:
    head = {"CPU": 8.0, "memory": (head_gib or 0) * GIB}
    worker = {"CPU": 64.0, "GPU": gpus, "memory": 400.0 * GIB}
    return plan.Resources(total={"CPU": 72.0, "GPU": gpus, "memory": (head_gib or 0) * GIB + 400.0 * GIB},
                          nodes=(head, worker), head_memory=None if head_gib is None else head_gib * GIB)


def test_the_heads_memory_caps_concurrency_where_each_run_starts_a_cleaner() -> None:
    spec = _spec("trainable.use_gpu=true", "trainable.num_workers=1", "trainable.in_process=false")
    made = plan.make_plan(spec, _cluster(2.0), local=False, cleaner=True)
    assert made.concurrent_trials == 3 and made.head_cap == 3  # 2 GiB // 600 MB
    assert ("concurrent     : 3 trial(s) at a time (the head's memory caps it: 2.0 GiB / 600 MB per trial; GPUs "
            "would allow 8)") in made.describe(), made.describe()


@pytest.mark.parametrize(("overrides", "cleaner", "head_gib"), [
    ([], False, 2.0),  # the lean trainer: no cleaner
    (["cluster.head_memory_per_trial_mb=0"], True, 2.0),  # told not to count it
    ([], True, None),  # the snapshot has no head
    ([], True, 64.0),  # the head holds more than the GPUs allow
])
def test_no_head_cap_where_it_does_not_bind(overrides: list[str], cleaner: bool, head_gib: float | None) -> None:
    spec = _spec("trainable.use_gpu=true", "trainable.num_workers=1", "trainable.in_process=false", *overrides)
    made = plan.make_plan(spec, _cluster(head_gib), local=False, cleaner=cleaner)
    assert made.concurrent_trials == 8 and "head's memory" not in made.describe()


def test_a_trial_in_its_own_process_starts_no_cleaner_and_is_not_capped() -> None:
    from sweeps.execution.cluster import remote

    spec = _spec("trainable.num_workers=1")
    assert plan.in_process(spec) and not remote.starts_cleaner(spec)
    assert plan.head_cap(spec, _cluster(0.5), cleaner=True) is None
    assert "a trial in its own process starts no placement-group cleaner" in remote.head_line(spec)


def test_the_cluster_snapshot_records_the_heads_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    nodes = [
        {"Alive": True, "Resources": {"CPU": 4.0, "memory": 3.0 * GIB, "node:__internal_head__": 1.0,
                                      "node:10.0.0.1": 1.0}},
        {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0, "memory": 30.0 * GIB, "node:10.0.0.2": 1.0}},
        {"Alive": False, "Resources": {"CPU": 8.0, "memory": 99.0 * GIB}},
    ]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 12.0, "GPU": 1.0, "memory": 33.0 * GIB})
    res = plan.cluster_resources()
    assert res.head_memory == 3.0 * GIB
    assert res.nodes[0] == {"CPU": 4.0, "memory": 3.0 * GIB} and len(res.nodes) == 2


def test_the_elastic_capacity_keeps_the_head_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from sweeps.execution.run.concurrency import Capacity

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 72.0, "GPU": 8.0})
    need = {"CPU": 2.0, "GPU": 1.0}
    assert Capacity(need, {"CPU": 1.0, "GPU": 1.0}, 1, 0)() == 8
    assert Capacity(need, {"CPU": 1.0, "GPU": 1.0}, 1, 0, head_cap=3)() == 3
    packed = {"CPU": 2.0, "GPU": 0.1}  # 10 trials per GPU: 8 // 0.1 in floats is 79
    assert Capacity(packed, {"CPU": 1.0, "GPU": 0.1}, 1, 0)() == 36  # the CPUs bind first (72 / 2)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 720.0, "GPU": 8.0})
    assert Capacity(packed, {"CPU": 1.0, "GPU": 0.1}, 1, 0)() == 80


def test_the_remote_dry_run_says_when_the_head_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from sweeps.execution.cluster import remote
    from sweeps.execution.levers import lean_trainer

    spec = _spec("trainable.num_workers=2")
    job = types.SimpleNamespace(runtime_env={"env_vars": {"A": "1"}})
    monkeypatch.setattr(ray, "get_runtime_context", lambda: job)
    monkeypatch.setattr(lean_trainer, "added_env", lambda env: {} if env == {"A": "1"} else {"B": "2"})
    monkeypatch.setattr(remote, "_lean", lambda: True)
    assert not remote.starts_cleaner(spec)  # the lean trainer: no cleaner
    job.runtime_env = {"env_vars": {}}
    assert remote.starts_cleaner(spec)  # Train would add a variable: the trial takes Train's own path
    job.runtime_env = {"env_vars": {"A": "1"}}
    monkeypatch.setattr(remote, "_lean", lambda: False)
    assert remote.starts_cleaner(spec)  # Train's own trainer, whatever the job's environment
    assert remote.head_line(spec).startswith("concurrency capped at the head's memory / 600 MB per trial")
    monkeypatch.setattr(remote, "_lean", lambda: True)
    assert remote.head_line(spec).startswith("not counted: the lean trainer starts no placement-group cleaner")
    assert remote.head_line(_spec("trainable.num_workers=2", "cluster.head_memory_per_trial_mb=0")).startswith(
        "not counted (cluster.head_memory_per_trial_mb=0)")


def test_every_worker_caps_before_the_users_loop_which_never_sees_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.train

    from sweeps.execution.train import bridge, startup

    calls: list[Any] = []
    monkeypatch.setattr(ray.train, "get_context", lambda: types.SimpleNamespace(get_world_rank=lambda: 0))
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: None)
    monkeypatch.setattr(bridge.stages, "stamp", lambda *a, **k: None)
    monkeypatch.setattr(startup, "arm_worker", lambda *a, **k: lambda: None)
    monkeypatch.setattr(bridge, "cap_gpu_memory", lambda pack: calls.append(("cap", pack)))
    monkeypatch.setattr(bridge, "import_dotted", lambda path: lambda config: calls.append(("loop", dict(config))))
    bridge.seeded_loop({PACK_KEY: 3, bridge.LOOP_CONFIG: "trainables.digits.train_loop", "lr": 0.1})
    assert calls == [("cap", 3), ("loop", {"lr": 0.1})]
