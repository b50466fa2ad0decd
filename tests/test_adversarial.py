"""Hostile input, refused before anything starts: exit 2, a message naming the key, and not one file written.

Each row runs the real CLI in-process (``cli.main.main``): target tricks, path traversal in names and aliases,
oversized values, control characters, YAML and interpolation bombs, secrets that would be stored, symlinks out
of SWEEPS_HOME. Ray must never start, and the test's whole folder (SWEEPS_HOME, the project, reports/) must
hold exactly the files it held before. Fast tier.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sweeps.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
Q = "+experiment=quickstart"
BILLION_LAUGHS = "lr: {dist: choice, values: &l9 [0.1]}\nl0: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 10)}]\n" for i in range(1, 9))
INTERP = [f"+trainable.params.l0=[{','.join(['aaaaaaaaaa'] * 10)}]"] + [
    f"+trainable.params.l{i}=[{','.join(['${trainable.params.l' + str(i - 1) + '}'] * 10)}]" for i in range(1, 9)]

# (argv, the text the error must hold: it names the key)
CASES: list[tuple[list[str], str]] = [
    # -- target tricks
    (["run", Q, "+searcher._args_=[{_target_: ray.tune.search.searcher.os.system, _args_: ['touch pwned']}]"],
     "searcher._args_[0]._target_: target 'ray.tune.search.searcher.os.system' resolves through "
     "'ray.tune.search.searcher.os' to 'os'"),
    (["run", Q, "scheduler._target_=ray.tune.schedulers.async_hyperband.pickle.loads"],
     "scheduler._target_: target 'ray.tune.schedulers.async_hyperband.pickle.loads' resolves through"),
    (["run", Q, "+searcher._args_=[{_target_: sweeps.ops.launch.os.system, _args_: ['touch pwned']}]"],
     "searcher._args_[0]._target_: target 'sweeps.ops.launch.os.system' is outside"),
    (["run", Q, "searcher._target_=trainables.common.os.system"],
     "searcher._target_: target 'trainables.common.os.system' resolves through 'trainables.common.os' to 'os'"),
    (["run", Q, "scheduler._target_=ray.tune.os.system"], "scheduler._target_: target 'ray.tune.os.system'"),
    (["run", Q, "scheduler._target_=ray.tune.schedulers.async_hyperband.np.random.seed"],
     "scheduler._target_: target 'ray.tune.schedulers.async_hyperband.np.random.seed' resolves through"),
    (["run", Q, "scheduler._target_=builtins.eval"], "scheduler._target_: target 'builtins.eval' is outside"),
    (["run", Q, "+scheduler.extra={_target_: subprocess.Popen, args: [sh]}"], "scheduler.extra._target_"),
    (["run", Q, "scheduler._target_=${oc.env:SWEEPS_EVIL_TARGET}"], "scheduler._target_: target 'os.system'"),
    (["run", Q, "scheduler._target_=trainables.digits"], "scheduler._target_: target 'trainables.digits' is a module"),
    (["run", Q, "trainable.loop=trainables.common.os.system"], "trainable.loop: 'trainables.common.os.system'"),
    (["run", Q, "trainable.builder=os.system"], "trainable.builder: 'os.system' is outside"),
    (["run", Q, "+trainable.datasets=subprocess.run"], "trainable.datasets: 'subprocess.run' is outside"),
    # -- widening the allowlist from an untrusted place (overrides; Hydra's search path)
    (["run", Q, "security.allowed_targets=[os]", "scheduler._target_=os.system"],
     "security.allowed_targets: 'security.allowed_targets=[os]' widens or changes the target allowlist"),
    (["run", Q, "security={allowed_targets: [torch.hub]}"], "security: 'security={allowed_targets: [torch.hub]}'"),
    (["run", Q, "+search_space@security=digits"], "search_space@security: '+search_space@security=digits'"),
    (["run", Q, "hydra.searchpath=[file://evilconf]", "+experiment@_global_=evil"],
     "hydra.searchpath: 'hydra.searchpath=[file://evilconf]' sets Hydra's own settings"),
    (["schedule", "add", "widen", Q, "security.allowed_targets=[mypkg]", "--cron", "0 2 * * *", "--no-install"],
     "security.allowed_targets: 'security.allowed_targets=[mypkg]' widens"),
    (["resume", "widened-20250101-000000-abcd"], "security.allowed_targets: 'security.allowed_targets=[mypkg_r]'"),
    (["run", "+experiment=interp", "+trainable.params.pkg=mypkg"],
     "security.allowed_targets[0]: '${trainable.params.pkg}' is an interpolation"),
    # -- a trusted place listing a package whose members load or run code
    (["run", "+experiment=widen", "scheduler._target_=pandas.read_pickle"],
     "security.allowed_targets[0]: 'pandas' may never be allowed"),
    (["run", Q, "+searcher._partial_=sometimes"], "searcher._partial_: must be true or false"),
    (["run", Q, "+searcher._target=os.system"], "searcher._target: looks like Hydra's '_target_'"),
    # -- a local MLflow store for a cluster's trials, refused before the cluster is contacted (none answers here)
    (["run", Q, "cluster=remote", "cluster.address=127.0.0.1:9"],
     "tracking.uri: 'sqlite:///"),
    # -- path traversal in names, aliases and ids
    (["run", Q, "sweep.name=.."], "sweep.name: '..' may only hold"),
    (["run", Q, "sweep.name=../../etc"], "sweep.name: '../../etc'"),
    (["run", Q, "promote.model_name=../evil"], "promote.model_name: '../evil' looks like a path"),
    (["run", Q, "promote.alias=../x"], "promote.alias: '../x' is not a valid alias"),
    (["promote", "latest", "--alias", "../../x"], "--alias: '../../x' is not a valid alias"),
    (["promote", "latest", "--model-name", "../../x"], "--model-name: '../../x' looks like a path"),
    (["schedule", "run", "../../x"], "NAME: '../../x' is not a valid schedule name"),
    (["report", "../../etc/passwd"], "SWEEP_ID: no sweep '../../etc/passwd'"),
    (["resume", "../x"], "SWEEP_ID: no sweep '../x'"),
    (["extend", "../y", "--more-trials", "1"], "SWEEP_ID: no sweep '../y'"),
    # -- oversized values
    (["run", Q, "trainable.params.note=" + "a" * 20_000], "trainable.params.note: the override is 20022 characters"),
    (["run", Q, "sweep.name=" + "a" * 200], "sweep.name: 'aaaa"),
    (["run", Q, "sweep.num_samples=100000000000"], "sweep.num_samples: 100000000000 trials is more than"),
    (["run", Q, *INTERP], "trainable.params.l8"),
    # -- control characters
    (["run", Q, "sweep.name=a\nb"], "sweep.name: the override holds a control character (U+000A)"),
    (["run", Q, "+trainable.params.note=red\x1b[31m"], "trainable.params.note: the override holds a control"),
    (["run", Q, "promote.model_name=a\tb"], "promote.model_name: 'a\\tb' may only hold"),
    # -- YAML bombs in a search-space file (the conf folder is a copy with the bad files added)
    (["run", Q, "search_space=bomb"], "search_space: the config file search_space/bomb.yaml is refused: its YAML"),
    (["run", Q, "search_space=huge"], "search_space: the config file search_space/huge.yaml is refused: it is"),
    # -- secrets that would be stored
    (["run", Q, "storage.path=s3://AKIAEXAMPLE:Sto-secret-8812@bucket/x"], "storage.path: 's3://AKIAEXAMPLE:***"),
    (["schedule", "add", "nightly", Q, "+tracking.password=Lit-secret-5521", "--cron", "0 2 * * *",
      "--no-install"], "tracking.password: a schedule stores its overrides"),
    # -- symlinks out of SWEEPS_HOME
    (["report", "planted-20250101-000000-abcd"], "planted-20250101-000000-abcd.json is a link to"),
    (["schedule", "run", "planted"], "planted.json is a link to"),
    (["resume", "stored-20250101-000000-abcd"], "tracking.password: its value was a secret typed on the command"),
    # -- exposing the UI
    (["ui", "--host", "0.0.0.0"], "--host: '0.0.0.0' is not a loopback address"),
]

# $SWEEPS_ALLOWED_TARGETS (trusted: the operator's) listing a package whose members load or run code
NEVER_TARGETS = {"torch.hub": "torch.hub.load", "pandas": "pandas.read_pickle",
                 "ray.util": "ray.util.get_node_ip_address",
                 "hydra._internal": "hydra._internal.utils.run_and_report", "sweeps": "sweeps.ops.install.add",
                 "pickle": "pickle.loads", "importlib": "importlib.import_module", "torch": "torch.load",
                 "ray": "ray.remote", "dill": "dill.loads", "numpy": "numpy.load", "builtins": "builtins.exec"}
ENV_CASES: list[tuple[list[str], str, dict[str, str]]] = [
    (["run", Q, f"scheduler._target_={target}"], f"SWEEPS_ALLOWED_TARGETS[1]: {pkg!r} may never be allowed",
     {"SWEEPS_ALLOWED_TARGETS": f"mypkg_ok,{pkg}"}) for pkg, target in NEVER_TARGETS.items()]
ROWS = [(argv, needle, {}) for argv, needle in CASES] + ENV_CASES


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime)
    return out


def _plant(env: Any) -> None:
    """The files the symlink and bomb rows need (made before the snapshot)."""
    outside = env.root / "outside"
    outside.mkdir()
    (outside / "record.json").write_text(json.dumps({"sweep_id": "planted-20250101-000000-abcd"}))
    (outside / "entry.json").write_text(json.dumps({"name": "planted", "overrides": [Q]}))
    (env.home / "sweeps").mkdir(parents=True)
    (env.home / "sweeps" / "planted-20250101-000000-abcd.json").symlink_to(outside / "record.json")
    (env.home / "schedules").mkdir()
    (env.home / "schedules" / "planted.json").symlink_to(outside / "entry.json")
    import dataclasses
    from dataclasses import asdict

    from sweeps import store

    rec = store.SweepRecord(sweep_id="stored-20250101-000000-abcd", experiment="quickstart", created=1.0,
                            status="interrupted", storage_path=str(env.home / "ray"),
                            experiment_dirs=[str(env.home / "ray" / "stored-20250101-000000-abcd")],
                            tracking_uri="sqlite:///x.db", overrides=[Q, "+tracking.password=***REDACTED***"])
    (env.home / "sweeps" / f"{rec.sweep_id}.json").write_text(json.dumps(asdict(rec)))
    widened = dataclasses.replace(rec, sweep_id="widened-20250101-000000-abcd",
                                  overrides=[Q, "security.allowed_targets=[mypkg_r]"])
    (env.home / "sweeps" / f"{widened.sweep_id}.json").write_text(json.dumps(asdict(widened)))
    conf = env.root / "conf_copy"
    shutil.copytree(REPO / "conf", conf, symlinks=False)
    (conf / "search_space" / "bomb.yaml").write_text(BILLION_LAUGHS)
    (conf / "search_space" / "huge.yaml").write_text("lr: {dist: choice, values: [0.1]}\n# " + "x" * 1_100_000)
    quickstart = (conf / "experiment" / "quickstart.yaml").read_text()
    (conf / "experiment" / "widen.yaml").write_text(quickstart + "security:\n  allowed_targets: [pandas]\n")
    (conf / "experiment" / "interp.yaml").write_text(
        quickstart + "security:\n  allowed_targets: ['${trainable.params.pkg}']\n")
    (env.root / "evilconf" / "experiment").mkdir(parents=True)  # what hydra.searchpath would reach
    (env.root / "evilconf" / "experiment" / "evil.yaml").write_text(
        "# @package _global_\nsecurity:\n  allowed_targets: [mypkg_evil]\n")


@pytest.fixture
def hostile(sweeps_env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    _plant(sweeps_env)
    monkeypatch.setenv("SWEEPS_CONF_DIR", str(sweeps_env.root / "conf_copy"))
    monkeypatch.setenv("SWEEPS_EVIL_TARGET", "os.system")
    return sweeps_env


def _refuse(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    import time

    with monkeypatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        t0 = time.monotonic()
        rc = cli_main.main(argv)
        took = time.monotonic() - t0
    return rc, capsys.readouterr().err, took


@pytest.mark.parametrize(("argv", "needle", "env"), ROWS, ids=[" ".join(a)[:70] + (f" {e}" if e else "")
                                                              for a, _, e in ROWS])
def test_hostile_input_is_refused_before_anything_starts(argv: list[str], needle: str, env: dict[str, str],
                                                         hostile: Any, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    before = _tree(hostile.root)
    rc, err, took = _refuse(argv, env, monkeypatch, capsys)
    assert rc == 2, err
    assert needle in err, err
    assert _tree(hostile.root) == before, "a refused command wrote or changed files"
    assert not (hostile.root / "pwned").exists()
    if "ray" in sys.modules:
        import ray

        assert not ray.is_initialized(), "Ray was started for refused input"
    assert took < 60, f"refusal took {took:.1f}s"


def test_each_row_is_refused_for_its_own_reason(hostile: Any, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """No row's expected message turns up in another row's refusal: each row exercises a distinct check, so a
    row that stopped reaching its check (refused earlier, for another reason) fails here too."""
    errs = [_refuse(argv, env, monkeypatch, capsys)[1] for argv, _, env in ROWS]
    for i, (argv, needle, _) in enumerate(ROWS):
        assert needle in errs[i], (argv, errs[i])
        others = [" ".join(ROWS[j][0]) for j, e in enumerate(errs) if j != i and needle in e]
        assert not others, f"{' '.join(argv)!r}: its message also answers {others}"
