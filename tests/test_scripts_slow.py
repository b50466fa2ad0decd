"""Users' training scripts swept as they are: the four examples, unmodified, copied into a project folder outside
the repo, scaffolded with `sweeps new trainable NAME --script PATH`, swept with ASHA on 2 Train workers per trial,
promoted, and the registered model loaded and asked in a fresh process. Slow tier.

Each framework needs a sweep of its own (a sweep runs one trainable); each sweep holds every promise of its kind
(the script's per-epoch history in each child run, the swept value reaching the script, promotion, the loaded
model). The Lightning sweep also holds resume (stopped by SIGTERM mid-trial, resumed, no epoch repeated); PBT needs
a scheduler of its own, so it has its own short sweep.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SweepsEnv, mlflow_client, trial_dirs, wait_for

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples" / "scripts"
COMMON = ["sweep.num_samples=2", "sweep.max_concurrent_trials=2", "report.enabled=false",
          "cluster.worker_start_timeout_s=120"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A project folder with the four example scripts, as a user has them (no package of ours in it)."""
    root = tmp_path_factory.mktemp("scripts-project")
    for f in EXAMPLES.glob("*.py"):
        (root / f.name).write_text(f.read_text())
    env = SweepsEnv(root)
    env.env.pop("SWEEPS_CONF_DIR")  # the project's own conf/ first, then the bundled one, as for a user
    try:
        yield env
    finally:
        env.cleanup()


def scaffold(env: SweepsEnv, name: str, script: str, *fixed: str) -> str:
    proc = env.run("new", "trainable", name, "--script", script, *(["--", *fixed] if fixed else []), check=True,
                   timeout=120)
    assert "yes promotion" in proc.stdout, proc.stdout
    return proc.stdout


def record(env: SweepsEnv, sweep_id: str) -> dict[str, Any]:
    return json.loads((env.home / "sweeps" / f"{sweep_id}.json").read_text())


def sweep_id_of(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("sweep ") and ":" in line:
            return line.split()[1].rstrip(":")
    raise AssertionError(f"no sweep id in:\n{output[-3000:]}")


def rows(trial_dir: Path) -> list[dict[str, Any]]:
    f = trial_dir / "result.json"
    out = []
    for line in (f.read_text().splitlines() if f.is_file() else []):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def children(env: SweepsEnv, rec: dict[str, Any]) -> list[Any]:
    c = mlflow_client(env.tracking_uri)
    return c.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'",
                         max_results=50)


def check_sweep(env: SweepsEnv, sweep_id: str, metric: str, knob: str, stopped: bool = False) -> dict[str, Any]:
    """Every child run holds the script's per-epoch history of ``metric``; the trials ran different ``knob``
    values and got different results; nothing is left RUNNING. ``stopped``: the sweep was stopped and resumed, so
    a trial may report the epoch in flight at the stop twice (Tune had its result, not yet its checkpoint: the
    resumed trial trains it again); never an epoch before that (a restart from 1 is out of order)."""
    rec = record(env, sweep_id)
    runs = children(env, rec)
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}, [r.info.status for r in runs]
    c = mlflow_client(env.tracking_uri)
    finals = []
    for r in runs:
        history = c.get_metric_history(r.info.run_id, metric)
        steps = [m.step for m in history]
        again = [a for a, b in zip(steps, steps[1:], strict=False) if a == b]
        assert sorted(set(steps)) == list(range(1, len(set(steps)) + 1)) and len(set(steps)) >= 2, \
            (r.info.run_name, [(m.step, m.value) for m in history])
        assert steps == sorted(steps) and len(again) <= (1 if stopped else 0), \
            (r.info.run_name, "at most the epoch in flight at a stop twice", steps)
        finals.append(history[-1].value)
    assert len({r.data.params.get(knob) for r in runs}) == 2, "the trials ran different values"
    assert finals[0] != finals[1], "the swept value reached the script: the trials' results differ"
    assert not c.search_runs([rec["mlflow_experiment_id"]], "attributes.status = 'RUNNING'")
    return rec


def promote_and_load(env: SweepsEnv, sweep_id: str, model: str, task: str) -> dict[str, Any]:
    """`sweeps promote`, then the model loaded by MLflow in a fresh process (no sweeps, no script) and asked
    about its own input example."""
    proc = env.run("promote", sweep_id, "--model-name", model, check=True, timeout=300)
    assert f"registered {model} version 1" in proc.stdout, proc.stdout
    code = ("import json, sys, mlflow\n"
            f"mlflow.set_tracking_uri({env.tracking_uri!r})\n"
            f"m = mlflow.pyfunc.load_model('models:/{model}@champion')\n"
            "out = m.predict(m.input_example)\n"
            "print(json.dumps({'rows': len(out), 'columns': list(out.columns), "
            "'leaked': [n for n in ('sweeps', 'trainables', 'lightning') if n in sys.modules]}))\n")
    empty = env.root / "elsewhere"
    empty.mkdir(exist_ok=True)
    loaded = subprocess.run([sys.executable, "-I", "-c", code], cwd=empty, capture_output=True, text=True,
                            timeout=240, env={**env.env, "PYTHONPATH": ""})
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    answer = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert answer["rows"] > 0 and not answer["leaked"], answer
    assert ("label" in answer["columns"]) == (task == "classification"), answer
    return answer


def test_lightning_script_stopped_by_sigterm_resumes_each_trial_from_its_checkpoint_and_promotes(
        project: SweepsEnv) -> None:
    """The Lightning script's sweep, stopped by SIGTERM mid-trial and resumed: each trial goes on from its checkpoint,
    and the best is promoted. Why its own sweep: the stop is the subject (a sweep runs one trainable); resume and
    promotion share it."""
    env = project
    scaffold(env, "lit", "lightning_digits.py")
    # batch 8: epochs long enough (~1 s) to stop the sweep mid-trial
    args = ["run", "+experiment=lit", *COMMON, "trainable.params.max_epochs=6", "trainable.params.batch_size=8",
            "~search_space.batch_size"]
    proc = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=env.root, env=env.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def mid_trial() -> bool:
            recs = list((env.home / "sweeps").glob("lit-*.json")) if (env.home / "sweeps").is_dir() else []
            if not recs:
                return proc.poll() is not None
            exp = json.loads(recs[0].read_text()).get("experiment_dirs") or []
            return proc.poll() is not None or any(2 <= len(rows(d)) < 6 for e in exp for d in trial_dirs(e))

        wait_for(mid_trial, 400, interval=0.5, what="a trial two epochs in")
        assert proc.poll() is None, "the sweep ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]
    sweep_id = next(p.stem for p in (env.home / "sweeps").glob("lit-*.json"))
    resumed = env.run("resume", sweep_id, check=True, timeout=600)
    assert "finished" in resumed.stdout, resumed.stdout[-2000:]
    rec = check_sweep(env, sweep_id, "val/loss", "lr", stopped=True)
    for exp in rec["experiment_dirs"]:
        for d in trial_dirs(exp):
            epochs = [r["epoch"] for r in rows(d)]
            assert epochs == [float(i) for i in range(len(epochs))], f"{d.name}: an epoch repeated: {epochs}"
    promote_and_load(env, sweep_id, "lit-digits", "classification")


def test_pbt_of_the_lightning_script_applies_the_mutated_learning_rate_after_the_exploit(project: SweepsEnv) -> None:
    """PBT of the Lightning script: after an exploit the script trains with the mutated learning rate. Why its own
    sweep: a sweep has one scheduler; it shares the scaffolded project with the other Lightning test. One Train
    worker per trial: the exploit is the subject (the SIGTERM sweep above runs the script on two)."""
    env = project
    if not (env.root / "conf" / "trainable" / "lit.yaml").is_file():
        scaffold(env, "lit", "lightning_digits.py")
    proc = env.run("run", "+experiment=lit", *COMMON, "trainable.num_workers=1", "scheduler=pbt",
                   "trainable.params.max_epochs=4",
                   "scheduler.synch=true", "scheduler.perturbation_interval=2", "scheduler.quantile_fraction=0.5",
                   "scheduler.resample_probability=1.0", "checkpoint.num_to_keep=4",
                   "+scheduler.hyperparam_mutations.lr={dist: loguniform, low: 1.0e-3, high: 1.0e-1}",
                   check=True, timeout=600)
    rec = record(env, sweep_id_of(proc.stdout))
    exploited = []
    for exp in rec["experiment_dirs"]:
        for d in trial_dirs(exp):
            rs = rows(d)
            for before, after in zip(rs, rs[1:], strict=False):
                if after["config"]["lr"] != before["config"]["lr"]:
                    exploited.append((d.name, after))
            # what the optimizer used, as the adapter observed it, is the trial's value at every epoch
            assert all(abs(r["opt/lr"] - r["config"]["lr"]) < 1e-12 for r in rs), \
                [(r["config"]["lr"], r["opt/lr"]) for r in rs]
    assert exploited, "PBT exploited no trial: nothing was checked"
    for name, after in exploited:
        assert after["epoch"] > 0, f"{name}: the exploit restarted from scratch instead of the donor's checkpoint"


@pytest.mark.parametrize(("name", "script", "fixed", "metric", "knob", "task", "epochs"), [
    ("wine", "ddp_wine.py", (), "val_loss", "lr", "classification", "trainable.params.epochs=3"),
    ("diab", "accelerate_diabetes.py", (), "val_loss", "lr", "regression", "trainable.params.epochs=3"),
    ("hfc", "hf_textclf.py", ("--use_cpu", "--max_examples", "200"), "eval_loss", "learning_rate",
     "classification", "trainable.params.num_train_epochs=2"),
])
def test_script_swept_with_asha_on_two_workers_then_promoted_and_loaded(
        project: SweepsEnv, name: str, script: str, fixed: tuple[str, ...], metric: str, knob: str, task: str,
        epochs: str) -> None:
    """A script swept as it is, on 2 Train workers per trial, promoted, and its model loaded in a fresh process. Why
    its own sweep per script: a sweep runs one trainable; each sweep holds every promise of its kind."""
    env = project
    scaffold(env, name, script, *fixed)
    started = time.monotonic()
    # the user's shell points MLflow at their store: the script's own MLflow calls must still open no run there
    proc = env.run("run", f"+experiment={name}", *COMMON, epochs, check=True, timeout=600,
                   extra_env={"MLFLOW_TRACKING_URI": env.tracking_uri})
    assert "2 total" in proc.stdout, proc.stdout[-2000:]
    sweep_id = sweep_id_of(proc.stdout)
    check_sweep(env, sweep_id, metric, knob)
    assert mlflow_client(env.tracking_uri).get_experiment_by_name("ddp-wine") is None, "a stray run of the script's"
    promote_and_load(env, sweep_id, f"{name}-model", task)
    print(f"{name}: sweep + promote in {time.monotonic() - started:.0f} s")
