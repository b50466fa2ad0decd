"""A deterministic loop and the decisions a straight sweep makes with it, for the resume tests.

The loop's score is a function of its learning rate and epoch only (no data, no noise), so with trials run one
at a time over a fixed grid, a scheduler makes the same decisions every time; the straight run's decisions
come from Tune's own scheduler classes fed the same results in the same order (:func:`straight_epochs`), or
from a real straight sweep where Tune's controller shapes the order (HyperBand). The loop lives in a project
folder of the test's own, as a user's trainable would (``detloop.py``, its conf, its search space).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from conftest import SweepsEnv, wait_for
from harness import Sweep

LRS = [0.05, 0.04, 0.03, 0.02, 0.01, 0.005]
_ids = itertools.count()  # trial ids unique across calls: an oracle fed twice keeps both trials apart

LOOP = textwrap.dedent('''
    """A deterministic loop: its score depends on lr and the epoch only (sweeps' resume tests)."""
    import json, math, os, tempfile, time


    def score(lr, epoch):
        return (1.0 - abs(math.log10(lr) - math.log10(0.05))) * (1.0 - 0.5 ** (epoch + 1))


    def train_loop(config):
        import ray.train

        lr, epochs, start = float(config["lr"]), int(config["epochs"]), 0
        ckpt = ray.train.get_checkpoint()
        if ckpt:
            with ckpt.as_directory() as d:
                with open(os.path.join(d, "state.json")) as f:
                    start = json.load(f)["epoch"] + 1
        for epoch in range(start, epochs):
            time.sleep(float(config.get("epoch_sleep_s", 0.0)))
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"epoch": epoch, "lr": lr}, f)
                ray.train.report({"score": score(lr, epoch), "epoch": epoch, "wall": time.time()},
                                 checkpoint=ray.train.Checkpoint.from_directory(d))
''')

TRAINABLE = textwrap.dedent("""
    name: detloop
    loop: detloop.train_loop
    metrics: [score, epoch, wall]
    num_workers: 1
    use_gpu: false
    resources_per_worker: {CPU: 1}
    placement_strategy: PACK
    checkpoint_every: 1
    params:
      epochs: 6
      epoch_sleep_s: 0.0
""")

EXPERIMENT = textwrap.dedent("""
    # @package _global_
    defaults:
      - override /trainable: detloop
      - override /search_space: detloop
      - override /searcher: grid
    sweep:
      name: detloop
      metric: score
      mode: max
      num_samples: 1
      max_concurrent_trials: 1
    report:
      enabled: false
    security:
      allowed_targets: [detloop]
""")


def project(root: Path) -> Path:
    """A project folder with the deterministic trainable; returns its conf folder."""
    (root / "conf" / "trainable").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "experiment").mkdir(parents=True, exist_ok=True)
    (root / "search_spaces").mkdir(exist_ok=True)
    (root / "detloop.py").write_text(LOOP)
    (root / "conf" / "trainable" / "detloop.yaml").write_text(TRAINABLE)
    (root / "conf" / "experiment" / "detloop.yaml").write_text(EXPERIMENT)
    (root / "search_spaces" / "detloop.yaml").write_text(f"lr: {{dist: choice, values: {LRS}}}\n")
    return root / "conf"


def score(lr: float, epoch: int) -> float:
    return (1.0 - abs(math.log10(lr) - math.log10(0.05))) * (1.0 - 0.5 ** (epoch + 1))


class _Trial:
    """What Tune's schedulers read of a trial (hashable, as Tune's own Trial is)."""

    def __init__(self, trial_id: str, lr: float) -> None:
        self.trial_id, self.config, self.status, self.evaluated_params = trial_id, {"lr": lr}, "RUNNING", {"lr": lr}


def straight_epochs(scheduler: Any, lrs: list[float], epochs: int) -> dict[float, int]:
    """What a straight sweep of these trials, one at a time in this order, runs under ``scheduler`` (a fresh
    Tune scheduler object): epochs per learning rate. Tune's own class decides."""
    from ray.tune.schedulers import TrialScheduler

    controller = SimpleNamespace(get_live_trials=lambda: [], get_trials=lambda: [])
    scheduler.set_search_properties("score", "max")
    out: dict[float, int] = {}
    for lr in lrs:
        trial = _Trial(f"t{next(_ids)}", lr)
        scheduler.on_trial_add(controller, trial)
        ran = 0
        for epoch in range(epochs):
            ran = epoch + 1
            result = {"training_iteration": ran, "score": score(lr, epoch), "time_total_s": float(ran)}
            if scheduler.on_trial_result(controller, trial, result) == TrialScheduler.STOP:
                break
        scheduler.on_trial_complete(controller, trial, result)
        out[lr] = ran
    return out


def epochs_by_lr(experiment_dirs: list[str]) -> dict[float, int]:
    """Epochs each learning rate ran, over every experiment of a sweep (the trials' own result rows)."""
    out: dict[float, int] = {}
    for exp in experiment_dirs:
        for trial in sorted(Path(exp).iterdir()):
            rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines() if x.strip()] \
                if (trial / "result.json").is_file() else []
            if rows:
                out[float(rows[-1]["config"]["lr"])] = int(max(r["training_iteration"] for r in rows))
    return out


def overlapping(experiment_dirs: list[str]) -> int:
    """The most trials whose results interleaved in time (trials that ran at once)."""
    spans = []
    for exp in experiment_dirs:
        for trial in Path(exp).iterdir():
            f = trial / "result.json"
            if f.is_file():
                ts = [json.loads(x)["wall"] for x in f.read_text().splitlines() if x.strip()]
                if ts:
                    spans.append((min(ts), max(ts)))
    return max((sum(1 for a, b in spans if a <= t <= b) for t, _ in spans), default=0)


class Project:
    """The test's project folder (its own conf and trainable) and the sweeps CLI run from it."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = SweepsEnv(tmp_path)
        self.root = tmp_path / "proj"
        self.conf = project(self.root)
        self.env.env["SWEEPS_CONF_DIR"] = str(self.conf)
        self.sweeps = Sweep(self.env, cwd=self.root)  # the one harness: every command runs through it

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``python -m sweeps ARGS`` from the project folder, to its end (any exit code)."""
        return self.sweeps.cli(*args, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``python -m sweeps ARGS`` from the project folder, in its own session, output piped."""
        return self.sweeps.start(*args)

    def record(self) -> dict | None:
        found = list((self.env.home / "sweeps").glob("[!.]*.json")) if (self.env.home / "sweeps").is_dir() else []
        return json.loads(found[0].read_text()) if len(found) == 1 else None

    def ended(self) -> int:
        """Trials that ended, by the sweep's event log."""
        rec = self.record()
        log = self.env.home / "logs" / f"{rec['sweep_id']}.log" if rec else None
        if log is None or not log.is_file():
            return 0
        return sum('"status": "TERMINATED"' in line for line in log.read_text().splitlines())


def stop_after(p: Project, proc: subprocess.Popen[str], trials: int, sig: int) -> str:
    """Once ``trials`` trials ended (the sweep's event log), ``sig`` to the driver (SIGKILL: its whole process
    group); what it printed."""
    wait_for(lambda: p.ended() >= trials or proc.poll() is not None, 300, 0.5, f"{trials} trials to end")
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    if sig == signal.SIGKILL:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=180)
    p.env.kill_ray()
    return out
