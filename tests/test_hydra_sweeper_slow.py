"""``python train.py -m hydra/sweeper=sweeps ...`` on a small Hydra app outside the project's packages: a real
sweep (Ray Tune + Train, MLflow, the report) started by Hydra, with the project's defaults under the app's
working directory. Slow tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SweepsEnv, mlflow_client

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent

APP = textwrap.dedent('''
    """A tiny Hydra app: an MLP on a synthetic regression, reporting its loss each epoch (or returning it)."""
    from pathlib import Path

    import hydra
    import ray.train
    import torch
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig


    @hydra.main(version_base="1.3", config_path="conf", config_name="config")
    def main(cfg: DictConfig) -> float:
        torch.manual_seed(cfg.seed)
        x = torch.randn(256, 8)
        y = x @ torch.linspace(-1, 1, 8) + 0.1 * torch.randn(256)
        layers = [torch.nn.Linear(8, cfg.hidden), torch.nn.ReLU()]
        for _ in range(cfg.model.depth - 1):
            layers += [torch.nn.Linear(cfg.hidden, cfg.hidden), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(cfg.hidden, 1))
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        loss = torch.tensor(0.0)
        for _ in range(cfg.epochs):
            for i in range(0, 256, 32):  # x[i:i+32]: (32, 8) -> (32,)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x[i:i + 32]).squeeze(1), y[i:i + 32])
                loss.backward()
                opt.step()
            if cfg.report_each_epoch:
                ray.train.report({"loss": float(loss)})
        out = Path(HydraConfig.get().runtime.output_dir)
        (out / "trained.txt").write_text(f"{cfg.model.depth} {cfg.lr}")
        return float(loss)


    if __name__ == "__main__":
        main()
''')
CONFIG = textwrap.dedent("""
    defaults:
      - model: small
      - _self_
    lr: 0.01
    hidden: 16
    epochs: 4
    seed: 0
    report_each_epoch: true
""")


def _app(root: Path) -> Path:
    app = root / "app"
    (app / "conf" / "model").mkdir(parents=True)
    (app / "train.py").write_text(APP)
    (app / "conf" / "config.yaml").write_text(CONFIG)
    (app / "conf" / "model" / "small.yaml").write_text("depth: 1\n")
    (app / "conf" / "model" / "large.yaml").write_text("depth: 2\n")
    return app


def _sweep(env: SweepsEnv, app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The app, run as its users run it; no SWEEPS_HOME or SWEEPS_CONF_DIR: the sweeper's defaults apply."""
    environ = {k: v for k, v in env.env.items() if k not in ("SWEEPS_HOME", "SWEEPS_CONF_DIR")}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "train.py", "-m", "hydra/sweeper=sweeps", *args], cwd=app, env=environ,
                          capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def _record(app: Path) -> dict:
    (path,) = list((app / ".sweeps" / "sweeps").glob("[!.]*.json"))
    return json.loads(path.read_text())


def _trial_runs(app: Path, rec: dict) -> list:
    c = mlflow_client(f"sqlite:///{app / '.sweeps' / 'mlflow.db'}")
    runs = c.search_runs([rec["mlflow_experiment_id"]])
    assert {r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags} == {rec["parent_run_id"]}
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == rec["parent_run_id"]]


def test_a_hydra_app_swept_with_asha_stops_trials_early(tmp_path: Path) -> None:
    """`python train.py -m hydra/sweeper=sweeps` on a Hydra app outside the project: ASHA stops trials early,
    each trial has its MLflow run and Hydra job folder, the report lands under the app's multirun folder.
    Why its own sweep: the sweep is started by Hydra's launcher in the app, not by `sweeps run`."""
    env = SweepsEnv(tmp_path / "env", seed_store=False)
    app = _app(tmp_path)
    try:
        _sweep(env, app, "lr=tag(log, interval(1e-4, 1e-1))", "hydra.sweeper.scheduler=asha",
               "hydra.sweeper.num_samples=4", "hydra.sweeper.metric=loss", "hydra.sweeper.mode=min",
               "hydra.sweeper.num_workers=1")
    finally:
        env.cleanup()
    rec = _record(app)
    assert (rec["status"], rec["experiment"], rec["scheduler"], rec["metric"]) == ("finished", "train", "asha", "loss")
    assert rec["counts"]["total"] == 4 and rec["counts"]["failed"] == 0
    assert rec["counts"]["early_stopped"] >= 1, rec["counts"]
    trials = _trial_runs(app, rec)
    assert len(trials) == 4 and all("loss" in r.data.metrics and "lr" in r.data.params for r in trials)
    report = Path(rec["report_dir"]) / "report.html"
    assert report.is_file() and report.is_relative_to(app / "multirun")
    assert len(list((app / "multirun").glob("*/*/[0-9]*/.hydra/config.yaml"))) == 4  # a job folder per trial


def test_a_task_that_only_returns_its_metric_over_config_group_options(tmp_path: Path) -> None:
    """A task that reports nothing and returns its metric, swept over config-group options with a grid, each
    trial on 2 Train workers (``hydra.sweeper.num_workers=2``, as a user scales a Hydra task out): the metric the
    task returns is the trial's. Why its own sweep: the other reports every epoch (ASHA needs it); this one must
    not report at all."""
    env = SweepsEnv(tmp_path / "env", seed_store=False)
    app = _app(tmp_path)
    try:
        _sweep(env, app, "model=small,large", "report_each_epoch=false", "epochs=2", "hydra.sweeper.searcher=grid",
               "hydra.sweeper.num_samples=1", "hydra.sweeper.metric=loss", "hydra.sweeper.mode=min",
               "hydra.sweeper.num_workers=2")
    finally:
        env.cleanup()
    rec = _record(app)
    assert rec["config"]["trainable"]["num_workers"] == 2, rec["config"]["trainable"]
    assert rec["status"] == "finished" and rec["counts"]["total"] == rec["counts"]["completed"] == 2
    trials = _trial_runs(app, rec)
    assert sorted(r.data.params["model"] for r in trials) == ["large", "small"]
    assert all(r.data.metrics["loss"] > 0 for r in trials)
    done = sorted(p.read_text().split()[0] for p in (app / "multirun").glob("*/*/[0-9]*/trained.txt"))
    assert done == ["1", "2"]  # each trial trained its own group option's depth
