"""Each lever's probe checks the calls it makes, not only the names: a surface whose signature or fields changed is
refused (so the lever is off and its public fallback runs), and the installed surfaces pass.

Pure: every ``check`` takes the surfaces it judges, so a stand-in with a changed signature is probed directly.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

from sweeps.execution.levers import (
    auth_refresh,
    cluster_version,
    core,
    gcs_tables,
    loopback_node,
    optuna_constraints,
    optuna_ga_lock,
    raylet_config,
    rendezvous,
    scheduler_state,
    state_api_address,
    tune_actors,
    tune_log_restore,
    tune_trials,
)

MINE = (auth_refresh, cluster_version, gcs_tables, loopback_node, optuna_constraints, optuna_ga_lock, raylet_config,
        rendezvous, scheduler_state, state_api_address, tune_actors, tune_log_restore, tune_trials)


@pytest.mark.parametrize("module", MINE, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_installed_surfaces_pass_each_probe(module: types.ModuleType) -> None:
    lever = module.LEVER
    if not core.installed(lever.package).startswith(lever.checked):
        pytest.skip(f"{lever.package} {core.installed(lever.package)} is not one {lever.name} was checked on")
    assert lever.probe() is None


# -- the helpers -------------------------------------------------------------------------------------------------


def test_binds_checks_the_call_as_made() -> None:
    def f(a: int, *, b: int = 0) -> None:
        return None

    assert core.binds(f, 1, b=2) is None
    assert "cannot be called" in (core.binds(f, 1, 2) or "")
    assert "cannot be called" in (core.binds(f, 1, c=2) or "")
    assert "no signature" in (core.binds(None) or "")


def test_fields_documents_and_source_says() -> None:
    from dataclasses import dataclass

    @dataclass
    class Config:
        backend: str = "gloo"

    assert core.fields(Config, "backend") is None
    assert "no field timeout_s" in (core.fields(Config, "backend", "timeout_s") or "")
    assert "no dataclass" in (core.fields(object, "x") or "")

    def store() -> None:
        """__init__(self: Store, host_name: str, port: int, master_listen_fd: int | None = None) -> None

        Creates a store."""

    assert core.documents(store, "host_name", "master_listen_fd") is None
    assert "wait_for_workers" in (core.documents(store, "wait_for_workers") or "")
    assert core.source_says("sweeps.execution.levers.core", "def binds(") is None
    assert "no longer says" in (core.source_says("sweeps.execution.levers.core", "def gone(") or "")


# -- each lever refuses a changed surface ------------------------------------------------------------------------


def test_auth_refresh_refuses_an_initialize_that_takes_no_config() -> None:
    class Config:
        @staticmethod
        def initialize() -> None:
            return None

    assert "cannot be called" in (auth_refresh.check(Config) or "")
    assert "lacks initialize" in (auth_refresh.check(object) or "")


def test_cluster_version_refuses_a_metadata_reader_that_wants_more() -> None:
    changed = types.SimpleNamespace(get_cluster_metadata=lambda gcs_client, timeout_s: {})
    assert "cannot be called" in (cluster_version.check(changed) or "")
    assert cluster_version.check(types.SimpleNamespace(get_cluster_metadata=lambda gcs_client: {})) is None


def test_gcs_tables_refuses_actors_without_a_state_filter() -> None:
    changed = types.SimpleNamespace(available_resources_per_node=lambda: {},
                                    actors=lambda actor_id=None, job_id=None: {})
    assert "actor_state_name" in (gcs_tables.check(changed) or "")
    changed = types.SimpleNamespace(available_resources_per_node=lambda node: {}, actors=lambda **kw: {})
    assert "cannot be called" in (gcs_tables.check(changed) or "")


SWITCH = types.SimpleNamespace(ENABLE_RAY_CLUSTER=True)


def _reads_the_switch(address: Any = None) -> str:
    return "10.0.0.1" if SWITCH.ENABLE_RAY_CLUSTER else "127.0.0.1"


def _does_not_read_it(address: Any = None) -> str:
    return "10.0.0.1"


def test_loopback_node_refuses_a_switch_that_is_no_bool_or_is_not_read() -> None:
    services = types.SimpleNamespace(get_node_ip_address=_reads_the_switch)
    assert loopback_node.check(types.SimpleNamespace(ENABLE_RAY_CLUSTER=True), services) is None
    assert "not bool" in (loopback_node.check(types.SimpleNamespace(ENABLE_RAY_CLUSTER="1"), services) or "")
    moved = types.SimpleNamespace(get_node_ip_address=_does_not_read_it)
    assert "no longer reads" in (loopback_node.check(types.SimpleNamespace(ENABLE_RAY_CLUSTER=True), moved) or "")


class _Group:
    def __len__(self) -> int:
        return 1

    def execute(self, fn: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def execute_single(self, rank: int, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return None

    def execute_single_async(self, rank: int, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return None


def test_rendezvous_refuses_a_worker_group_whose_calls_changed() -> None:
    class Changed(_Group):
        def execute_single(self, rank: int, fn: Any, args: tuple[Any, ...] = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
            return None

    assert rendezvous.check_worker_group(_Group) is None
    assert "cannot be called" in (rendezvous.check_worker_group(Changed) or "")


def test_rendezvous_refuses_a_store_without_a_listen_fd_and_a_config_without_timeout() -> None:
    import ray.train.torch.config as tc
    import torch.distributed as dist

    class OldStore:
        def __init__(self) -> None:
            """__init__(self: TCPStore, host_name: str, port: int, world_size: int | None = None, is_master: bool
            = False, timeout: timedelta = ..., wait_for_workers: bool = True) -> None"""

    assert rendezvous.check_torch(tc, dist.TCPStore) is None
    assert "master_listen_fd" in (rendezvous.check_torch(tc, OldStore) or "")
    from dataclasses import dataclass

    @dataclass
    class TorchConfig:
        backend: str | None = None

        @property
        def backend_cls(self) -> Any:
            return None

    changed = types.SimpleNamespace(TorchConfig=TorchConfig, _TorchBackend=tc._TorchBackend,
                                    _set_torch_distributed_env_vars=tc._set_torch_distributed_env_vars)
    assert "timeout_s" in (rendezvous.check_torch(changed, dist.TCPStore) or "")


def test_optuna_constraints_refuses_a_set_constraint_without_a_value() -> None:
    class Trial:
        def set_constraint(self, key: str) -> None:
            return None

    searcher = types.SimpleNamespace(_ot_trials={})
    assert "cannot be called" in (optuna_constraints.check(searcher, Trial) or "")
    assert "_ot_trials" in (optuna_constraints.check(types.SimpleNamespace(_ot_trials=[]), Trial) or "")


def test_optuna_ga_lock_refuses_a_lock_used_beyond_what_the_stand_in_offers() -> None:
    sampler = types.SimpleNamespace(_thread_lock=threading.Lock())
    assert optuna_ga_lock.check([sampler], "with self._thread_lock:\n    pass") is None
    assert "locked" in (optuna_ga_lock.check([sampler], "if self._thread_lock.locked(): pass") or "")
    assert "keeps no _thread_lock" in (optuna_ga_lock.check([types.SimpleNamespace()], "") or "")


def test_state_api_address_refuses_a_lookup_that_wants_more_or_reads_no_variable() -> None:
    def reads(address: str | None) -> str:
        import os

        return os.environ.get("RAY_API_SERVER_ADDRESS", "")

    def wants_more(address: str | None, cluster: str) -> str:
        return "RAY_API_SERVER_ADDRESS"

    def reads_nothing(address: str | None) -> str:
        return ""

    assert state_api_address.check(reads) is None
    assert "cannot be called" in (state_api_address.check(wants_more) or "")
    assert "no longer reads" in (state_api_address.check(reads_nothing) or "")


class _Logger:
    def log_trial_start(self, trial: Any) -> None:
        self._restore_from_remote("result.json", trial)

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        return None


def test_tune_log_restore_refuses_a_changed_hook_or_a_trial_without_a_local_path() -> None:
    class Trial:
        local_path = "/tmp/t"

    class Changed(_Logger):
        def _restore_from_remote(self, trial: Any) -> None:  # type: ignore[override]
            return None

    class Silent:
        def _restore_from_remote(self, file_name: str, trial: Any) -> None:
            return None

    assert tune_log_restore.check([_Logger], Trial) is None
    assert "cannot be called" in (tune_log_restore.check([Changed], Trial) or "")
    assert "no longer calls" in (tune_log_restore.check([Silent], Trial) or "")
    assert "local_path" in (tune_log_restore.check([_Logger], object) or "")


def test_tune_actors_refuses_a_cache_whose_get_or_table_changed() -> None:
    class Cache:
        def __init__(self) -> None:
            self._cache: dict[Any, Any] = {}

        def get(self, trainable_cls: Any) -> Any:
            return trainable_cls

    def module(cache: type) -> types.SimpleNamespace:
        return types.SimpleNamespace(DEFAULT_ENV_VARS={}, ENV_VARS_TO_PROPAGATE={"X"}, _ActorClassCache=cache)

    class NoArg(Cache):
        def get(self) -> Any:  # type: ignore[override]
            return None

    class NoTable(Cache):
        def __init__(self) -> None:
            self._cache = []  # type: ignore[assignment]

    assert tune_actors.check(module(Cache)) is None
    assert "cannot be called" in (tune_actors.check(module(NoArg)) or "")
    assert "_cache dict" in (tune_actors.check(module(NoTable)) or "")


def test_raylet_config_refuses_a_key_or_a_value_the_installed_rays_config_does_not_take() -> None:
    wanted = raylet_config.settings(preload=True, prestart_first_driver=False)
    assert sorted(wanted) == ["preload_python_modules", "prestart_worker_first_driver"], "the probe tries every key"
    said = raylet_config.check({**wanted, "preload_python_modules_typo": ["torch"]}) or ""
    assert "unexpected config parameter preload_python_modules_typo" in said, said
    said = raylet_config.check({"preload_python_modules": "torch"}) or ""
    assert "type must be array" in said, said
    assert "could not be asked" in (raylet_config.refused(wanted, python="/nonexistent/python") or "")


def test_a_refused_raylet_config_is_ray_defaults_and_one_log_line_never_a_dead_sweep(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from sweeps.execution.cluster import raystart
    from sweeps.execution.warmstart import warm

    if not core.installed("ray").startswith(raylet_config.LEVER.checked):
        pytest.skip("the lever is off on this Ray anyway")
    monkeypatch.delenv(core.OFF, raising=False)
    monkeypatch.setenv("SWEEPS_PRESTART", "0")  # the one setting that needs no pool: prestart_worker_first_driver
    cold = warm.Levers(lean=False, pool=False, reuse=False, why_off={})
    core.forget()
    assert raystart.worker_pool_settings(cold) == {"_system_config": {"prestart_worker_first_driver": False}}
    real = raylet_config.refused
    monkeypatch.setattr(raylet_config, "refused", lambda config: real({**config, "gone_in_this_ray": 1}))
    core.forget()
    with caplog.at_level(logging.INFO, logger=core.__name__):
        assert raystart.worker_pool_settings(cold) == {}, "Ray's defaults: ray.init gets no _system_config"
        assert raystart.worker_pool_settings(cold) == {}
    said = [r.getMessage() for r in caplog.records if "raylet_config" in r.getMessage()]
    assert len(said) == 1 and "unexpected config parameter gone_in_this_ray" in said[0], said
    core.forget()


def test_scheduler_state_round_trips_every_kind_it_saves_with_restored_trials_in_place() -> None:
    import ray.tune.schedulers.pb2  # noqa: F401 - a sweep that uses PB2 has imported it: then it is probed too
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import HyperBandScheduler

    if not core.installed("ray").startswith(scheduler_state.LEVER.checked):
        pytest.skip("the lever is off on this Ray anyway")
    assert [m().__class__.__name__ for m in scheduler_state._kinds()] == list(scheduler_state.KINDS)
    assert scheduler_state._probe() is None
    before = HyperBandScheduler(time_attr="training_iteration", max_t=9, metric="score", mode="max")
    before.on_trial_add(None, Trial("t", trial_id="a", stub=True))
    after = HyperBandScheduler(time_attr="training_iteration", max_t=9)
    scheduler_state.load(after, scheduler_state.dump(before), {"a": Trial("t", trial_id="a", stub=True)})
    over = [c.cell_contents for c in after._get_r0.__closure__ if isinstance(c.cell_contents, HyperBandScheduler)]
    assert over and all(s is after for s in over), "its brackets are sized by itself, not by a copy"


def test_scheduler_state_refuses_a_scheduler_that_does_not_pickle_or_does_not_come_back_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.schedulers import MedianStoppingRule, PopulationBasedTraining

    class Locked(PopulationBasedTraining):  # a patch release adds an attribute that does not pickle
        def __init__(self) -> None:
            super().__init__(time_attr="training_iteration", perturbation_interval=100,
                             hyperparam_mutations={"x": [1, 2]})
            self._lock = threading.Lock()

    class Forgetful:
        def __init__(self) -> None:
            self.seen = [1, 2]

        def __getstate__(self) -> dict[str, Any]:  # pickles without its contents
            return {}

    class Forgets(MedianStoppingRule):
        def __init__(self) -> None:
            super().__init__(time_attr="training_iteration", grace_period=100)
            self._memo = Forgetful()

    assert "does not pickle (TypeError" in (scheduler_state.round_trip(Locked) or "")
    said = scheduler_state.round_trip(Forgets) or ""
    assert "does not come back whole" in said and "_memo" in said, said
    monkeypatch.setattr(scheduler_state, "_kinds", lambda: [Forgets])
    assert "Forgets's state does not come back whole" in (scheduler_state._probe() or "")


def test_tune_trials_reads_the_same_trials_with_the_lever_on_or_off(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Any) -> None:
    """The experiment's trials as Tune's ExperimentAnalysis reads them, whether or not it reads their results into
    pandas (a saved Ray 2.60 experiment, copied)."""
    import shutil
    from pathlib import Path

    exp = tmp_path / "asha"
    shutil.copytree(Path(__file__).parent / "golden" / "2.60.0" / "asha", exp)
    seen = []
    for off in ("", "tune_trials"):
        monkeypatch.setenv(core.OFF, off)
        core.forget()
        assert core.applies(tune_trials.LEVER) is (off == "")
        seen.append(sorted((t.trial_id, t.status, t.config.get("lr")) for t in tune_trials.trials(str(exp))))
    assert seen[0] == seen[1] and len(seen[0]) == 4, seen
