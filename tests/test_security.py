"""The allowlist by resolved object, building targets with the same resolver, redaction (keys, URIs, overrides,
known values), the tracker's pickled state, config bounds, the UI's exposure rule, Ray token env logic and the
loopback switch. Fast tier: nothing here starts Ray or MLflow."""

from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

import pytest

from sweeps.config import limits, redaction, security, targets
from sweeps.errors import BadInput

# -- the allowlist checks what a target resolves to -----------------------------------------------------------


@pytest.mark.parametrize("target, why", [
    ("trainables.common.os.system", "resolves through 'trainables.common.os' to 'os'"),
    ("trainables.common.Path", "to 'pathlib'"),
    ("ray.tune.os.system", "is outside the allowed packages"),
    ("ray.tune.schedulers.async_hyperband.np.random.seed", "to 'numpy'"),
    # real paths through allowed packages, caught by the walk (the string is inside an allowed package)
    ("ray.tune.search.searcher.os.system", "resolves through 'ray.tune.search.searcher.os' to 'os'"),
    ("ray.tune.schedulers.async_hyperband.pickle.loads",
     "resolves through 'ray.tune.schedulers.async_hyperband.pickle' to 'pickle'"),
    ("optuna.samplers._cmaes.pickle.loads", "resolves through 'optuna.samplers._cmaes.pickle' to 'pickle'"),
    ("trainables.charlm.importlib.import_module", "resolves through 'trainables.charlm.importlib' to 'importlib'"),
    ("sweeps.ops.launch.os.system", "is outside the allowed packages"),  # `sweeps` is not allowed
    ("trainables.__main__", "dunder"),
    ("trainables.digits", "is a module, not a function or class"),
    ("os.system", "is outside the allowed packages"),
    ("optuna_evil.x", "is outside the allowed packages"),
])
def test_targets_are_refused_by_what_they_resolve_to(target: str, why: str) -> None:
    errors = security.check_targets({"searcher": {"_args_": [{"_target_": target}]}})
    assert len(errors) == 1 and errors[0].startswith("searcher._args_[0]._target_: ") and why in errors[0]


def test_the_walk_not_the_prefix_refuses_os_reached_through_an_allowed_module() -> None:
    """Were `sweeps.ops` allowed, `sweeps.ops.launch.os.system` passes the string check: the walk must stop at `os`."""
    with pytest.raises(targets.TargetRefused, match=r"resolves through 'sweeps\.ops\.launch\.os' to 'os'"):
        targets.resolve("sweeps.ops.launch.os.system", ("sweeps.ops",))


@pytest.mark.parametrize(("path", "allowed", "defined_in"), [
    ("sweeps.ops.install.add", "sweeps.ops", "sweeps.ops.install"),
    ("torch.hub.load", "torch", "torch.hub"),
    ("pandas.read_pickle", "pandas", "pandas"),  # pandas' functions claim the module `pandas`
    ("numpy.load", "numpy", "numpy"),
    ("hydra.utils.instantiate", "hydra", "hydra._internal.instantiate._instantiate2"),
])
def test_the_walk_refuses_code_from_a_never_package_even_when_its_package_is_allowed(
        path: str, allowed: str, defined_in: str) -> None:
    with pytest.raises(targets.TargetRefused, match=rf"is defined in '{re.escape(defined_in)}', which may never"):
        targets.resolve(path, (allowed,))


def test_the_walk_reads_where_a_function_really_lives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy and pandas set `__module__` to the package; a function claiming an allowed module while its code lives
    in `pickle` is refused by where its globals come from."""
    pkg = tmp_path / "mypkg_lie"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import pickle, types\n"
                                     "loads = types.FunctionType(pickle._loads.__code__, pickle._loads.__globals__)\n"
                                     "loads.__module__ = __name__\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(targets.TargetRefused, match=r"is defined in 'pickle', which may never be a target"):
        targets.resolve("mypkg_lie.loads", ("mypkg_lie",))


def test_string_check_comes_before_any_import() -> None:
    before = set(sys.modules)
    assert security.check_targets({"s": {"_target_": "antigravity.fly"}})
    assert "antigravity" not in set(sys.modules) - before, "a module outside the allowlist was imported"


def test_a_refused_extension_widens_nothing(sweeps_env, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A refused entry is not used for the rest of the checks either: its package is never imported."""
    from sweeps.ops.prepare import prepare

    before = set(sys.modules)
    monkeypatch.setenv("SWEEPS_ALLOWED_TARGETS", "antigravity")
    with pytest.raises(BadInput) as exc:
        prepare(["+experiment=quickstart", "scheduler._target_=antigravity.fly"])
    assert "SWEEPS_ALLOWED_TARGETS[0]: 'antigravity' may never be allowed" in str(exc.value)
    assert "scheduler._target_: target 'antigravity.fly' is outside" in str(exc.value)
    assert "antigravity" not in set(sys.modules) - before


def test_every_target_anywhere_is_checked() -> None:
    cfg = {"a": [{"b": {"_target_": "os.system"}}], "c": {"_args_": [[{"_target_": "subprocess.run"}]]},
           "d": {"e": {"f": {"_target_": "ray.tune.schedulers.ASHAScheduler"}}}}
    keys = sorted(e.split(":")[0] for e in security.check_targets(cfg))
    assert keys == ["a[0].b._target_", "c._args_[0][0]._target_"]


def test_reserved_key_tricks_are_refused() -> None:
    errors = security.check_targets({"searcher": {"_target": "os.system", "__target__": "x", "_partial_": "yes",
                                                  "_recursive_": 0, "_convert_": "eval", "_args_": "rm"}})
    assert len(errors) == 6, errors


def test_allowlist_extension_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "mypkg_sec"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\ndef make(x=1):\n    return ('made', x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {"searcher": {"_target_": "mypkg_sec.make", "inner": {"_target_": "mypkg_sec.os.system"}}}
    errors = security.check_targets(cfg, extra=["mypkg_sec"])
    assert len(errors) == 1 and "searcher.inner._target_" in errors[0] and "to 'os'" in errors[0]
    assert security.extra_errors(["os", "builtins", "ray", "subprocess.x", "a b", 3]) and len(
        security.extra_errors(["os", "builtins", "ray", "subprocess.x", "a b", 3])) == 6
    assert security.extra_errors(["mypkg_sec", "ray.tune.stopper", "torch.optim.lr_scheduler"]) == []


@pytest.mark.parametrize("package", [
    "torch.hub", "torch", "torch.serialization", "pandas", "pandas.io", "ray.util", "ray", "ray.util.multiprocessing",
    "hydra._internal", "hydra", "hydra.utils", "omegaconf", "sweeps", "sweeps.ops", "sweeps.config", "pickle",
    "importlib", "dill", "cloudpickle", "joblib", "marshal", "runpy", "code", "builtins", "numpy", "yaml", "mlflow",
])
def test_packages_that_load_or_run_code_are_never_allowed(package: str) -> None:
    errors = security.extra_errors(["mypkg_ok", package], key="SWEEPS_ALLOWED_TARGETS")
    assert len(errors) == 1 and errors[0].startswith(f"SWEEPS_ALLOWED_TARGETS[1]: {package!r} may never be allowed")


def test_build_uses_the_same_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # were the check broken, `touch x` would land here
    pkg = tmp_path / "mypkg_build"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\ndef make(*a, **k):\n    return (a, k)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    allowed = security.prefixes(["mypkg_build"])
    out = targets.build({"_target_": "mypkg_build.make", "_args_": [{"_target_": "mypkg_build.make", "y": 2}],
                         "x": "${oc.env:HOME}"}, allowed, "searcher", points=[{"_target_": "os.system"}])
    assert out == ((((), {"y": 2}),), {"x": "${oc.env:HOME}", "points": [{"_target_": "os.system"}]}), \
        "nested nodes built, strings never re-interpolated, kwargs never instantiated"
    part = targets.build({"_target_": "mypkg_build.make", "_partial_": True, "a": 1}, allowed, "s")
    assert part() == ((), {"a": 1})
    with pytest.raises(BadInput, match=r"searcher\._args_\[0\]\._target_: 'mypkg_build\.os\.system' resolves"):
        targets.build({"_target_": "mypkg_build.make", "_args_": [{"_target_": "mypkg_build.os.system",
                                                                 "_args_": ["touch x"]}]}, allowed, "searcher")
    assert not (tmp_path / "x").exists()


# -- redaction --------------------------------------------------------------------------------------------------


def test_uri_userinfo_is_redacted_anywhere() -> None:
    found: set[str] = set()
    out = redaction.redact({"tracking": {"uri": "postgresql://bob:pw-Zq81x@db:5432/ml"},
                            "params": {"note": "see https://u:tok-91aa7@git.example/x and more"}}, found)
    assert out["tracking"]["uri"] == f"postgresql://bob:{redaction.REDACTED}@db:5432/ml"
    assert "tok-91aa7" not in out["params"]["note"] and found == {"pw-Zq81x", "tok-91aa7"}
    assert redaction.split_userinfo("https://u:p%40ss@h:1/x") == ("https://h:1/x", "u", "p@ss")


def test_public_uri_keeps_the_real_one_in_memory_only() -> None:
    public = redaction.public_uri("http://admin:Pw-mem-7731@127.0.0.1:5999")
    assert public == "http://127.0.0.1:5999"
    assert redaction.real_uri(public) == "http://admin:Pw-mem-7731@127.0.0.1:5999"
    db = redaction.public_uri("postgresql://u:Db-pw-5521@h/db")
    assert "Db-pw-5521" not in db and redaction.real_uri(db).endswith("u:Db-pw-5521@h/db")
    assert "Db-pw-5521" not in redaction.scrub("connect postgresql://u:Db-pw-5521@h/db failed; Db-pw-5521")


def test_overrides_are_redacted_and_restored() -> None:
    given = ["+tracking.password=hunter2-xyz", "+trainable.params.api_key=${oc.env:KEY}", "sweep.seed=3",
             "tracking.uri=https://me:tk-44441@h", "trainable.params={token: abc-99999, lr: 0.1}"]
    stored = redaction.redact_overrides(given)
    text = " ".join(stored)
    for secret in ("hunter2-xyz", "tk-44441", "abc-99999"):
        assert secret not in text
    assert stored[1] == given[1] and stored[2] == "sweep.seed=3", "interpolations and plain values are kept"
    with pytest.raises(BadInput, match="tracking.password: its value was a secret"):
        redaction.restore_overrides(stored[:1], [])
    again = redaction.restore_overrides(stored[:3], ["+tracking.password=hunter2-xyz", "sweep.seed=4"])
    assert again == ["+tracking.password=hunter2-xyz", given[1], "sweep.seed=3", "sweep.seed=4"]


def test_env_secret_references_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPS_T_API_TOKEN", "env-secret-3141")
    monkeypatch.setenv("SWEEPS_T_PLAIN", "not-a-secret")
    found = redaction.env_secrets({"a": ["${oc.env:SWEEPS_T_API_TOKEN}"], "b": "${oc.env:SWEEPS_T_PLAIN}"})
    assert found == {"env-secret-3141"}
    redaction.remember(found)
    assert redaction.redact({"note": "x env-secret-3141 y"}) == {"note": f"x {redaction.REDACTED} y"}


def test_tracker_pickles_no_secret(tmp_path: Path) -> None:
    from sweeps.tracking.callback import _Tracker

    t = _Tracker(uri="http://admin:Pickle-pw-6620@127.0.0.1:1", experiment_id="1", parent_run_id="p",
                 sweep_id="s", metric="m", mode="max", secrets={"Extra-sec-0091"},
                 fixed_params={"api_key": "Param-sec-4478", "db": "postgresql://u:Url-sec-9034@h/d", "lr": 0.1})
    blob = pickle.dumps(t)
    for secret in (b"Pickle-pw-6620", b"Extra-sec-0091", b"Param-sec-4478", b"Url-sec-9034"):
        assert secret not in blob, secret
    assert pickle.loads(blob).fixed_params["lr"] == 0.1


# -- bounds --------------------------------------------------------------------------------------------------


def test_billion_laughs_is_counted_not_expanded() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    assert limits.yaml_expansion(bomb) > limits.MAX_EXPANDED
    assert limits.yaml_expansion("a: &a [1, 2]\nb: *a\n") == 9  # map, 2 keys, 2 lists of 2


def test_interpolation_bomb_is_sized_before_resolving() -> None:
    cfg = {"l0": ["x" * 10] * 10, **{f"l{i}": [f"${{l{i - 1}}}"] * 10 for i in range(1, 9)}}
    assert limits.interpolation_size(cfg) > limits.MAX_RESOLVED
    assert limits.interpolation_size({"a": 1, "b": "${a}", "c": {"d": "${..a}"}}) < 50


# -- exposure, token, loopback --------------------------------------------------------------------------------


def test_ui_exposure_needs_auth_or_insecure() -> None:
    from sweeps.tracking.ui import check_exposure

    assert check_exposure("127.0.0.1", False, False) is None
    with pytest.raises(BadInput, match="--host: '0.0.0.0' is not a loopback address.*--auth.*--insecure"):
        check_exposure("0.0.0.0", False, False)
    assert "user and password" in (check_exposure("0.0.0.0", True, False) or "")
    assert "no authentication" in (check_exposure("0.0.0.0", False, True) or "")


def _ui_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> list[str]:
    """The ``mlflow server`` argv that ``python -m sweeps ui FLAGS`` starts (the CLI's own parser and handler,
    down to the process start, which is caught: nothing listens)."""
    import subprocess

    from sweeps.cli.main import build_parser
    from sweeps.cli.mlflow import cli_ui
    from sweeps.tracking.server import free_port

    class Started(Exception):
        pass

    ran: list[list[str]] = []

    def popen(cmd: list[str], **_: object) -> None:
        ran.append(cmd)
        raise Started

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", "s3cret-for-the-first-start")
    monkeypatch.setattr(subprocess, "Popen", popen)
    args = build_parser().parse_args(["ui", "--port", str(free_port("127.0.0.1")), "--tracking-uri",
                                      f"sqlite:///{tmp_path / 'mlflow.db'}", *flags])
    with pytest.raises(Started):
        cli_ui(args)
    (cmd,) = ran
    return cmd


def test_the_ui_listens_on_loopback_unless_told_and_a_wider_host_gets_the_auth_app(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = _ui_runs(tmp_path, monkeypatch)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--app-name" not in cmd, cmd
    cmd = _ui_runs(tmp_path, monkeypatch, "--host", "0.0.0.0", "--auth")
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--app-name") + 1] == "basic-auth", cmd


def test_basic_auth_app_exists_in_this_mlflow() -> None:
    from importlib.metadata import entry_points

    assert "basic-auth" in {e.name for e in entry_points(group="mlflow.app")}


def test_driver_gets_token_mode_only_with_a_token(tmp_path: Path) -> None:
    from sweeps.execution.cluster.raystart import driver_auth_env, token_source

    assert driver_auth_env({}, str(tmp_path)) == {}
    assert driver_auth_env({"RAY_AUTH_TOKEN": "t"}, str(tmp_path)) == {"RAY_AUTH_MODE": "token"}
    assert driver_auth_env({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "none")}, str(tmp_path)) == {}
    (tmp_path / "tok").write_text("t")
    assert token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "tok")}, str(tmp_path)) == "RAY_AUTH_TOKEN_PATH"
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    assert driver_auth_env({}, str(tmp_path)) == {"RAY_AUTH_MODE": "token"}
    assert driver_auth_env({"RAY_AUTH_MODE": "disabled"}, str(tmp_path)) == {}, "an explicit mode is respected"


def test_token_mode_is_turned_on_in_process_only_on_a_checked_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray reads RAY_AUTH_MODE when imported: turning it on later needs a Ray internal (its config refresh). On a
    checked Ray the driver does that (every cluster test's driver: none exports the mode); on another one it
    stops before connecting and says what to export."""
    from sweeps.errors import BadInput
    from sweeps.execution.cluster import raystart
    from sweeps.execution.levers import core as levers_core

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t")
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
    with pytest.raises(BadInput, match="RAY_AUTH_TOKEN.*export RAY_AUTH_MODE=token and run again"):
        raystart.enable_driver_auth()
    assert "RAY_AUTH_MODE" not in __import__("os").environ
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # what the user exports: nothing left to do
    raystart.enable_driver_auth()


def test_connection_error_names_the_variables() -> None:
    from sweeps.execution.cluster.raystart import TOKEN_HELP

    for name in ("RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token"):
        assert name in TOKEN_HELP
    assert redaction.scrub(TOKEN_HELP) == TOKEN_HELP, "the CLI's scrub must not mangle the help"


def test_loopback_switch_is_set_and_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.ray_constants as rc
    import ray._private.services as services

    from sweeps.execution.cluster import loopback

    monkeypatch.delenv(loopback.SWITCH, raising=False)
    before = rc.ENABLE_RAY_CLUSTER
    loopback.enter_local()
    try:
        assert services.get_node_ip_address() == "127.0.0.1"
        import os

        assert os.environ[loopback.SWITCH] == "0"
    finally:
        loopback.leave_local()
    assert rc.ENABLE_RAY_CLUSTER == before and loopback.SWITCH not in __import__("os").environ


def test_on_an_unchecked_ray_the_loopback_levers_take_rays_public_path_and_say_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The node-address switch and the rendezvous backend are Ray internals: on a Ray version they were not
    checked against neither is touched; a warning, the record's listeners line and Train's own rendezvous say
    so. (A real sweep on this path: tests/test_warm_slow.py.)"""
    import ray._private.ray_constants as rc
    import ray._private.services as services

    from sweeps.execution.cluster import loopback
    from sweeps.execution.levers import core as levers_core

    monkeypatch.delenv(loopback.SWITCH, raising=False)
    assert loopback.internals_missing() is None, "the installed Ray is the checked one"
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
    before = rc.ENABLE_RAY_CLUSTER
    with caplog.at_level("WARNING", logger="sweeps.execution.cluster.loopback"):
        loopback.enter_local()
    try:
        assert loopback.SWITCH not in __import__("os").environ and rc.ENABLE_RAY_CLUSTER == before
        assert services.get_node_ip_address() != "127.0.0.1" or not before, "Ray's own node address"
        assert "not only on loopback: ray 2.61.0 is not a version it was checked against" in caplog.text
        assert loopback.torch_config() is None, "Train's own rendezvous"
        assert loopback.listeners("local", {}).startswith("the node's address, not loopback: Ray's public path")
    finally:
        loopback.leave_local()
    assert rc.ENABLE_RAY_CLUSTER == before
    monkeypatch.delenv(levers_core.TEST_RAY_VERSION)
    loopback.enter_local()  # a loopback node address, as on the checked Ray
    try:
        assert loopback.torch_config() is not None, "the checked Ray: the loopback rendezvous"
        monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
        assert loopback.torch_config() is None, "a loopback node on an unchecked Ray: still Train's own rendezvous"
    finally:
        loopback.leave_local()



def test_gloo_and_nccl_are_pinned_to_loopback_unless_the_user_set_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded Ray's workers get gloo's and NCCL's socket settings on the loopback interface; a user's own
    value is kept, and the one-line note (parent-run tag, report) then says the promise depends on it."""
    from sweeps.execution.cluster import loopback, raystart
    from sweeps.ops.prepare import prepare

    lo = loopback.loopback_interface()
    if lo is None:
        pytest.skip("no loopback interface on this machine")
    pinned = {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": f"={lo}", "NCCL_SOCKET_FAMILY": "AF_INET"}
    assert loopback.worker_env({}) == pinned
    own = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth1"}
    assert loopback.worker_env(own) == {"NCCL_SOCKET_FAMILY": "AF_INET"}, "the user's own values are not overridden"
    assert loopback.listeners("local", {}) == "loopback only (Ray, the torch rendezvous, gloo and NCCL on 127.0.0.1)"
    note = loopback.listeners("local", own)
    assert "GLOO_SOCKET_IFNAME=eth1, NCCL_SOCKET_IFNAME=eth0" in note and "loopback promise depends on it" in note
    assert loopback.listeners("local", pinned) == loopback.listeners("local", {}), \
        "the pins an earlier sweep of this process left behind are not the user's"
    assert "no loopback promise" in loopback.listeners("remote", {})
    # what the embedded Ray's processes inherit (raystart.train_env), with and without a user's setting
    for key in pinned:
        monkeypatch.delenv(key, raising=False)
    local = prepare(["+experiment=quickstart"])
    assert pinned.items() <= raystart.train_env(local).items()
    monkeypatch.setenv("NCCL_SOCKET_FAMILY", "AF_INET6")
    env = raystart.train_env(local)
    assert "NCCL_SOCKET_FAMILY" not in env and env["NCCL_SOCKET_IFNAME"] == f"={lo}"
    assert "NCCL_SOCKET_FAMILY=AF_INET6" in loopback.listeners("local")
    remote = prepare(["+experiment=quickstart", "cluster=remote", "tracking.uri=http://127.0.0.1:5000"])
    assert not pinned.keys() & raystart.train_env(remote).keys(), "a cluster's nodes choose their own interfaces"


# Run in a fresh interpreter: the sweep's listeners line and the levers the driver decides beside Ray's start
# (sweeps.ops.launch), and whether that imported torch.
LISTENERS = """
import json, sys
from sweeps.ops.prepare import prepare
from sweeps.ops import launch
from sweeps.execution.cluster import loopback
spec = prepare(["+experiment=quickstart", *sys.argv[1:]])
missing = loopback.internals_missing(launch.needs_rendezvous(spec))
print(json.dumps([launch.listeners(spec), missing, "torch" in sys.modules]))
"""


@pytest.mark.parametrize(("overrides", "line", "imports_torch"), [
    (["trainable.num_workers=1"], "loopback only (Ray on 127.0.0.1; each trial trains in its own process: no torch "
                                  "rendezvous, gloo or NCCL)", False),
    (["trainable.num_workers=1", "trainable.in_process=false"],
     "loopback only (Ray, the torch rendezvous, gloo and NCCL on 127.0.0.1)", True),
    (["trainable.num_workers=2"], "loopback only (Ray, the torch rendezvous, gloo and NCCL on 127.0.0.1)", True),
])
def test_a_sweep_of_in_process_trials_asks_no_rendezvous_lever_and_its_driver_imports_no_torch(
        overrides: list[str], line: str, imports_torch: bool, tmp_path: Path) -> None:
    """Trials that each train in their own process form no torch process group: the driver decides only Ray's
    node-address lever (the rendezvous lever's probe imports torch and Train's torch backend, ~1.4 CPU-s of every
    such driver), and the listeners line says why there is no rendezvous. A worker group, even of one, keeps both."""
    import json
    import os
    import subprocess

    conf = Path(__file__).parents[1] / "conf"
    env = {**os.environ, "SWEEPS_HOME": str(tmp_path / "home"), "SWEEPS_CONF_DIR": str(conf)}
    for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", LISTENERS, *overrides], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [line, None, imports_torch]

# -- through the CLI ------------------------------------------------------------------------------------------


def _conf_with(root: Path, name: str, security_yaml: str) -> Path:
    """A copy of conf/ with one more experiment: quickstart plus ``security_yaml``."""
    import shutil

    conf = root / "conf_trusted"
    if not conf.exists():
        shutil.copytree(Path(__file__).resolve().parent.parent / "conf", conf)
    (conf / "experiment" / f"{name}.yaml").write_text(
        (conf / "experiment" / "quickstart.yaml").read_text() + "\n" + security_yaml)
    return conf


def test_allowlist_additions_come_from_conf_files_and_the_operator_env(
        sweeps_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    from sweeps.cli import main as cli_main

    conf = _conf_with(sweeps_env.root, "trusted", "security:\n  allowed_targets: [mypkg_file]\n")
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(conf))
    monkeypatch.setenv("SWEEPS_ALLOWED_TARGETS", " mypkg_env , ")
    assert cli_main.main(["run", "+experiment=trusted", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "added by security.allowed_targets and $SWEEPS_ALLOWED_TARGETS: mypkg_file, mypkg_env" in out
    assert "targets allowed: trainables" in out


@pytest.mark.parametrize("override", [
    "security.allowed_targets=[mypkg_cli]", "+security.allowed_targets=[mypkg_cli]",
    "++security.allowed_targets=[mypkg_cli]", "security={allowed_targets: [mypkg_cli]}", "~security",
    "+search_space@security=digits", "hydra.searchpath=[file:///tmp]", "+hydra/launcher=basic",
])
def test_an_override_may_not_set_the_allowlist_or_hydra(override: str, sweeps_env,  # noqa: ANN001
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from sweeps.cli import main as cli_main

    assert cli_main.main(["run", "+experiment=quickstart", override, "--dry-run"]) == 2
    err = capsys.readouterr().err
    key = re.match(r"[+~]*([^=]*)", override).group(1)  # type: ignore[union-attr]
    assert f"error: {key}: {override!r} " in err, err
    assert ("SWEEPS_ALLOWED_TARGETS" in err and "a file under" in err) or "Hydra's own settings" in err


def test_an_interpolation_in_the_allowlist_is_refused(sweeps_env, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from sweeps.cli import main as cli_main

    conf = _conf_with(sweeps_env.root, "interp", "security:\n  allowed_targets: ['${trainable.params.pkg}']\n")
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(conf))
    assert cli_main.main(["run", "+experiment=interp", "+trainable.params.pkg=mypkg_x", "--dry-run"]) == 2
    assert "security.allowed_targets[0]: '${trainable.params.pkg}' is an interpolation" in capsys.readouterr().err


def test_promotion_reads_the_record_list_and_the_operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from sweeps.registry import model

    rec = SimpleNamespace(config={"security": {"allowed_targets": ["mypkg_rec"]}})
    monkeypatch.setenv("SWEEPS_ALLOWED_TARGETS", "mypkg_env2")
    assert model._allowed(rec)[-2:] == ("mypkg_rec", "mypkg_env2")
    with pytest.raises(BadInput, match=r"security.allowed_targets\[0\]: 'pandas' may never be allowed"):
        model._allowed(SimpleNamespace(config={"security": {"allowed_targets": ["pandas"]}}))


def test_schedule_replay_checks_targets_again(sweeps_env, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    """An entry edited on disk after `schedule add` is checked again when it replays: no sweep starts."""
    from sweeps.cli import main as cli_main
    from sweeps.ops import schedule

    home = schedule.paths.home()
    schedule.save_entry(schedule.Entry(
        name="edited", overrides=["+experiment=quickstart", "searcher._target_=trainables.common.os.system"],
        cron="0 2 * * *", tz=None, kind="external", project=str(sweeps_env.root), home=str(home)))
    assert cli_main.main(["schedule", "run", "edited"]) == 2
    assert "searcher._target_: target 'trainables.common.os.system' resolves" in capsys.readouterr().err
    assert not (home / "sweeps").exists() and not (home / "ray").exists(), "a sweep was started"
    assert (schedule.read_state("edited") or {}).get("exit_code") == 2


def test_schedule_replay_refuses_a_stored_allowlist_override(sweeps_env,  # noqa: ANN001
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """An entry's overrides are replayed every night: one that widens the allowlist is refused there too."""
    from sweeps.cli import main as cli_main
    from sweeps.ops import schedule

    home = schedule.paths.home()
    schedule.save_entry(schedule.Entry(
        name="widened", overrides=["+experiment=quickstart", "security.allowed_targets=[mypkg_sched]"],
        cron="0 2 * * *", tz=None, kind="external", project=str(sweeps_env.root), home=str(home)))
    assert cli_main.main(["schedule", "run", "widened"]) == 2
    assert "security.allowed_targets: 'security.allowed_targets=[mypkg_sched]' widens" in capsys.readouterr().err
    assert not (home / "sweeps").exists() and not (home / "ray").exists(), "a sweep was started"


def test_cli_errors_are_scrubbed(sweeps_env, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    from sweeps.cli import main as cli_main

    rc = cli_main.main(["run", "+experiment=quickstart", "tracking.uri=http://u:Echo-sec-1212@127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc == 2 and "tracking.uri" in err and "Echo-sec-1212" not in err, err


@pytest.mark.parametrize("experiment", ["digits_optuna", "digits_hyperopt", "digits_pbt", "digits_pb2",
                                        "digits_grid", "quickstart"])
def test_bundled_searchers_and_schedulers_build_through_the_allowlist(experiment: str, sweeps_env) -> None:  # noqa: ANN001
    from sweeps.execution.tuning.searchers import build_scheduler, build_searcher
    from sweeps.ops.prepare import prepare

    spec = prepare([f"+experiment={experiment}"])
    searcher, scheduler = build_searcher(spec, 2), build_scheduler(spec)
    assert type(searcher).__module__.startswith("ray.tune.search")
    assert type(scheduler).__module__.startswith("ray.tune.schedulers")
    if experiment == "digits_optuna":
        assert type(searcher._sampler).__name__ == "TPESampler"  # the nested _target_ was built too
