"""Trials in their own process (issue 51): one process runs trial after trial, and none sees what the one before left.

Why its own sweep: its loop is the subject. It records what it finds at each trial's start (its pid, config, torch's
seed and thread count, Python's first random draw, the files in its working directory, ``get_checkpoint()``) and
then dirties the process on purpose (reseeds, changes the thread count, leaves a file), which no shared sweep's
loop may. What in-process trials share with worker-group trials (checkpoints, resume after SIGTERM, PBT exploits,
Tune's retries, promotion) is asserted on the shared sweeps that now run 1-worker trials in their own process:
tests/test_resume_decisions_slow.py, tests/test_resume_slow.py, tests/test_schedulers_slow.py,
tests/test_bridge_slow.py, tests/test_registry_serve_slow.py. Slow tier.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest
from conftest import trial_dirs
from harness import Sweep

pytestmark = pytest.mark.slow

LOOP = textwrap.dedent('''
    """Records what a trial finds in its process, then leaves the process dirty for the next one."""
    import json, os, random, tempfile, time

    SEEN = []  # module state: kept across the trials of a process, as any imported module's


    def train_loop(config):
        import ray.train
        import torch

        ckpt = ray.train.get_checkpoint()
        found = {"pid": os.getpid(), "lr": config["lr"], "torch_seed": torch.initial_seed(),
                 "threads": torch.get_num_threads(), "draw": random.random(), "files": sorted(os.listdir(".")),
                 "checkpoint": ckpt is not None, "before": list(SEEN),
                 "world": ray.train.get_context().get_world_size()}
        SEEN.append(config["lr"])
        # leave the process dirty (every trial, also the ones stopped early): the next must not see any of it
        torch.manual_seed(1234)  # tests/test_inprocess_slow.py: DIRTY_SEED
        random.seed(1)
        torch.set_num_threads(5)
        with open("left-behind.txt", "w") as f:
            f.write("the trial before")
        with open(os.path.join(config["out"], f"{config['lr']}.json"), "w") as f:
            json.dump(found, f)
        try:
            for epoch in range(2):
                with tempfile.TemporaryDirectory() as d:
                    with open(os.path.join(d, "state.json"), "w") as f:
                        json.dump({"epoch": epoch}, f)
                    ray.train.report({"score": config["lr"] * (epoch + 1), "epoch": epoch},
                                     checkpoint=ray.train.Checkpoint.from_directory(d))
        except BaseException:  # stopped by Tune: a loop whose teardown takes a while (closing its data loaders)
            time.sleep(float(config["pause_s"]))
            raise
''')

TRAINABLE = textwrap.dedent("""
    name: probe
    loop: probe.train_loop
    metrics: [score, epoch]
    num_workers: 1
    in_process: auto
    use_gpu: false
    resources_per_worker: {CPU: 2}
    placement_strategy: PACK
    checkpoint_every: 1
    params:
      epochs: 2
      pause_s: 4
""")

EXPERIMENT = textwrap.dedent("""
    # @package _global_
    defaults:
      - override /trainable: probe
      - override /search_space: probe
      - override /searcher: grid
      - override /scheduler: asha
    sweep:
      name: probe
      metric: score
      mode: max
      num_samples: 1
      max_concurrent_trials: 1
    scheduler:
      grace_period: 1
      reduction_factor: 2
    report:
      enabled: false
    security:
      allowed_targets: [probe]
""")

LRS = [0.3, 0.2, 0.1]  # in the grid's order; ASHA stops the second and the third at their first epoch
DIRTY_SEED = 1234  # what each trial leaves torch seeded with


def _project(root: Path, out: Path) -> Path:
    for sub in ("conf/trainable", "conf/experiment", "search_spaces"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "probe.py").write_text(LOOP)
    (root / "conf" / "trainable" / "probe.yaml").write_text(TRAINABLE + f"  out: {out}\n")
    (root / "conf" / "experiment" / "probe.yaml").write_text(EXPERIMENT)
    (root / "search_spaces" / "probe.yaml").write_text(f"lr: {{dist: grid, values: {LRS}}}\n")
    return root / "conf"


def test_one_process_runs_the_trials_and_none_sees_what_the_one_before_left(sweep: Sweep, tmp_path: Path) -> None:
    env = sweep.env
    root, out = tmp_path / "proj", tmp_path / "found"
    out.mkdir()
    env.env["SWEEPS_CONF_DIR"] = str(_project(root, out))
    dry = env.run("run", "+experiment=probe", "--dry-run", cwd=root, check=True)
    assert "in the trial's own process, reused for the next trial" in dry.stdout, dry.stdout[-2000:]
    env.run("run", "+experiment=probe", cwd=root, check=True, timeout=600)
    found = {float(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(found) == sorted(LRS), found
    first = found[LRS[0]]
    assert len({f["torch_seed"] for f in found.values()}) == len(LRS), "torch seeded alike: not from the OS"
    assert {f["pid"] for f in found.values()} == {first["pid"]}, "the trials did not share one process"
    assert [found[lr]["before"] for lr in LRS] == [[], LRS[:1], LRS[:2]], "not one reused process, in order"
    dirty = random.Random(1).random()
    for lr in LRS:
        f = found[lr]
        assert f["lr"] == lr and f["world"] == 1, f
        assert f["torch_seed"] != DIRTY_SEED, ("torch's random state of the trial before", f)
        assert f["draw"] != dirty, ("Python's random state of the trial before", f)
        assert f["threads"] == 2, ("the thread count is not the trial's 2 CPUs", f)
        assert "left-behind.txt" not in f["files"], ("the working directory of the trial before", f)
        assert f["checkpoint"] is False, ("get_checkpoint() returned the trial before's checkpoint", f)
    rec = Sweep.only(env).record()
    # stopped at their first epoch, the second and third trials' loops took 4 s to end while the next trial
    # waited for their process: stopped early, none failed (Tune's 2 s wait failed the next trial)
    assert rec["counts"]["failed"] == 0 and rec["counts"]["early_stopped"] == 2, rec["counts"]
    for trial in trial_dirs(rec["experiment_dirs"][0]):
        rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines() if x.strip()]
        epochs = 2 if rows[-1]["config"]["lr"] == LRS[0] else 1
        assert [r["epoch"] for r in rows] == list(range(epochs)), (trial, rows)
        assert len(list(trial.glob("checkpoint_*"))) == epochs, trial
        assert not list(trial.glob("events.out.tfevents*")), "Tune's own TensorBoard logger is off (driver memory)"
        first_row = rows[0]
        stages = [v for k, v in first_row.items() if k.startswith("startup/") and k.endswith("_s")
                  and k != "startup/total_s"]
        assert stages and abs(sum(stages) - first_row["startup/total_s"]) < 0.01, first_row
