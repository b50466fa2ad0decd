"""The script adapter's fast tier: reading a script (parsers, metrics, roles), the command line it gets, the
scaffold, the refusals before any trial (exit 2 with the line to add), and the hooks on real torch/MLflow."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from sweeps.config.sections import script as script_section
from sweeps.ops import scriptscan
from trainables.script import hooks, launch
from trainables.script.session import META_DIR, STATE_FILE, Reporter
from trainables.script.spec import ScriptSpec, argv

EXAMPLES = REPO / "examples" / "scripts"


def scan(name: str) -> Any:
    path = EXAMPLES / f"{name}.py"
    return scriptscan.scan(path.read_text(), str(path))


def names(s: Any) -> dict[str, Any]:
    return {p.name: p for p in s.params}


# -- reading a script ---------------------------------------------------------------------------------------
def test_argparse_reader_on_the_lightning_example() -> None:
    s = scan("lightning_digits")
    p = names(s)
    assert (s.framework, s.parser) == ("lightning", "argparse")
    assert p["batch_size"].flag == "--batch-size" and p["batch_size"].kind == "int" and p["batch_size"].default == 64
    assert p["lr"].kind == "float" and p["lr"].default == 0.01
    assert (s.epochs.name, s.epochs.flag) == ("max_epochs", "--max-epochs")
    assert (s.output.name, s.resume.name, s.lr.name) == ("output_dir", "ckpt_path", "lr")
    assert [m.name for m in s.metrics] == ["train/loss", "val/loss", "val/acc"]
    assert s.model_class == "DigitsMLP"


def test_store_true_choices_and_mlflow_keys_on_the_ddp_example() -> None:
    s = scan("ddp_wine")
    p = names(s)
    assert s.framework == "torch"
    assert p["resume"].kind == "switch" and s.resume.name == "resume"
    assert p["backend"].choices == ("gloo", "nccl")
    assert [m.name for m in s.metrics] == ["train_loss", "val_loss", "val_acc"]
    assert all("mlflow.log_metrics" in m.where for m in s.metrics)
    assert s.model_build == "WineNet(hidden=config['hidden'])" and s.saved_file == "model.pt"


def test_hf_argument_parser_reads_the_dataclasses_and_training_arguments() -> None:
    s = scan("hf_textclf")
    p = names(s)
    assert (s.framework, s.parser) == ("hf", "hf")
    assert p["hidden_size"].flag == "--hidden_size" and p["max_length"].default == 32
    assert p["learning_rate"].flag == "--learning_rate" and s.lr.name == "learning_rate"
    assert s.epochs.name == "num_train_epochs" and "per_device_train_batch_size" in p
    assert "eval_accuracy" in [m.name for m in s.metrics]


def test_accelerator_log_keys_and_the_model_it_builds() -> None:
    s = scan("accelerate_diabetes")
    assert s.framework == "accelerate"
    assert [m.name for m in s.metrics] == ["train_loss", "val_loss", "val_rmse"]
    assert s.resume.flag == "--resume-from-checkpoint"
    assert s.model_build == "Regressor(hidden=config['hidden'])"


def test_lightning_cli_options_and_its_subcommand() -> None:
    src = '''
import lightning.pytorch as pl
from lightning.pytorch.cli import LightningCLI
class Net(pl.LightningModule):
    def __init__(self, lr: float = 0.01, hidden: int = 32):
        super().__init__()
    def validation_step(self, batch, i):
        self.log("val_loss", 1.0)
LightningCLI(Net)
'''
    s = scriptscan.scan(src, "cli.py")
    p = names(s)
    assert s.parser == "lightningcli" and s.subcommand == "fit"
    assert p["lr"].flag == "--model.lr" and p["hidden"].default == 32
    assert s.epochs.flag == "--trainer.max_epochs"


def test_tensorboard_tags_and_sweeps_report_keys_are_metrics() -> None:
    src = '''
import argparse
import sweeps
from torch.utils.tensorboard import SummaryWriter
p = argparse.ArgumentParser(); p.add_argument("--lr", type=float, default=0.1); a = p.parse_args()
w = SummaryWriter()
w.add_scalar("val/loss", 1.0, 0)
sweeps.report({"val_acc": 0.5})
'''
    assert [m.name for m in scriptscan.scan(src, "tb.py").metrics] == ["val/loss", "val_acc"]


def test_the_config_layer_and_the_adapter_share_one_table() -> None:
    from trainables.script import spec

    assert script_section.SPEC_KEY == spec.SPEC_KEY
    assert script_section.FRAMEWORKS == spec.FRAMEWORKS and script_section.NEEDS == spec.NEEDS
    assert script_section.digest("x = 1\n") == spec.digest("x = 1\n")


# -- the command line a trial runs --------------------------------------------------------------------------
SPEC = ScriptSpec(framework="torch", path="/p/train.py", args=("fit", "--quiet"),
                  flags={"lr": "--lr", "batch_size": "--batch-size", "output_dir": "--output-dir",
                         "ckpt": "--ckpt", "tag": "--tag"},
                  switches={"amp": "--amp", "shuffle": "!--no-shuffle"}, output="output_dir", resume="ckpt")


def test_argv_spells_each_value_in_the_parsers_own_option() -> None:
    out = argv(SPEC, {"lr": 0.1, "batch_size": 32, "amp": True, "shuffle": False, "tag": None, "other": 5},
               output_dir="/w", resume_from=None)
    assert out == ["/p/train.py", "fit", "--quiet", "--lr", "0.1", "--batch-size", "32", "--output-dir", "/w",
                   "--amp", "--no-shuffle"]
    assert float(argv(SPEC, {"lr": 1 / 3}, output_dir=None, resume_from=None)[4]) == 1 / 3


def test_argv_passes_the_checkpoint_to_a_resume_option_or_switch() -> None:
    assert argv(SPEC, {"ckpt": "ignored"}, output_dir=None, resume_from="/w/s.pt")[-2:] == ["--ckpt", "/w/s.pt"]
    switch = ScriptSpec(framework="torch", path="/p/t.py", switches={"resume": "--resume"}, resume="resume")
    assert argv(switch, {"resume": False}, output_dir=None, resume_from="") == ["/p/t.py", "--resume"]
    assert argv(switch, {"resume": False}, output_dir=None, resume_from=None) == ["/p/t.py"]


# -- scaffold and refusals ----------------------------------------------------------------------------------
def run_cli(cwd: Path, *args: str, block: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m sweeps ARGS`` in ``cwd``; ``block``: a module this process behaves as not having."""
    code = ("import sys\n" + (f"sys.modules[{block!r}] = None\n" if block else "")
            + "from sweeps.cli.main import main\nsys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "SWEEPS_HOME": str(cwd / ".home"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=110)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for f in EXAMPLES.glob("*.py"):
        (tmp_path / f.name).write_text(f.read_text())
    return tmp_path


def test_scaffold_of_the_hf_script_with_fixed_args_passes_its_own_checks(project: Path) -> None:
    proc = run_cli(project, "new", "trainable", "hfc", "--script", "hf_textclf.py", "--", "--use_cpu",
                   "--max_examples", "200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (project / "conf" / "trainable" / "hfc.yaml").read_text()
    assert 'args: ["--use_cpu", "--max_examples", "200", "--eval_strategy", "epoch"]' in text
    assert 'learning_rate: "--learning_rate"' in text and "max_examples:" not in text.split("flags:")[1]
    assert "epochs: ${.num_train_epochs}" in text
    space = (project / "search_spaces" / "hfc.yaml").read_text()
    assert space.startswith("#") and "learning_rate: {dist: loguniform" in space
    experiment = (project / "conf" / "experiment" / "hfc.yaml").read_text()
    assert "metric: eval_loss" in experiment and "mode: min" in experiment
    assert "yes promotion" in proc.stdout and "yes resume" in proc.stdout


@pytest.mark.parametrize(("name", "script", "says"), [
    ("lit", "lightning_digits.py", "model_class: DigitsMLP"),
    ("wine", "ddp_wine.py", "model_build: \"WineNet(hidden=config['hidden'])\""),
    ("diab", "accelerate_diabetes.py", "model_build: \"Regressor(hidden=config['hidden'])\""),
])
def test_scaffold_of_each_example_composes(project: Path, name: str, script: str, says: str) -> None:
    from sweeps.ops import scaffold

    plan = scaffold.plan(name, root=project, script=script)
    scaffold.write(plan)
    text = (project / "conf" / "trainable" / f"{name}.yaml").read_text()
    assert says in text and "loop: trainables.script.train_loop" in text
    assert not (project / f"{name}.py").exists(), "the script is the code: no module of ours"


def test_a_missing_framework_exits_2_naming_the_extra(project: Path) -> None:
    proc = run_cli(project, "new", "trainable", "lit", "--script", "lightning_digits.py", block="lightning")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install 'sweeps[lightning]'" in proc.stderr
    assert not (project / "conf").exists(), "nothing written"


def test_no_parser_and_no_metric_exit_2_with_the_line_to_add(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("import torch\nfor epoch in range(3):\n    print(epoch)\n")
    proc = run_cli(tmp_path, "new", "trainable", "plain", "--script", "plain.py")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "parser.add_argument('--lr', type=float, default=0.01)" in proc.stderr
    assert "sweeps.report({'val_loss': val_loss})" in proc.stderr
    header = (tmp_path / "conf" / "trainable" / "plain.yaml").read_text()
    assert "# TO DO:" in header and "sweeps.report" in header


def test_a_searched_key_the_script_never_reads_is_refused(project: Path) -> None:
    from sweeps.ops import scaffold

    scaffold.write(scaffold.plan("wine", root=project, script="ddp_wine.py"))
    proc = run_cli(project, "run", "+experiment=wine", "+search_space.momentum={dist: uniform, low: 0.1, high: 0.9}",
                   "--dry-run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "search_space.momentum" in proc.stderr and "takes no option for 'momentum'" in proc.stderr
    assert "batch_size" in proc.stderr, "the valid choices are named"


def test_script_section_refusals_name_the_key(tmp_path: Path) -> None:
    from sweeps.config.reader import Reader

    r = Reader({})
    node = {"path": str(tmp_path / "missing.py"), "framework": "keras", "flags": {"lr": "lr"}, "output": "out"}
    assert script_section.parse(r, node) is None
    said = "\n".join(r.errors)
    assert "trainable.script.framework: 'keras'; use one of lightning, hf, accelerate, torch" in said
    assert "trainable.script.path: cannot read" in said
    assert "trainable.script.flags" in said


# -- the hooks, on real torch and MLflow --------------------------------------------------------------------
class Points:
    """Records report points the way the reporter would make them."""

    def __init__(self) -> None:
        self.flushes = 0
        self.examples: Any = None
        self.rank = 0

    def flush(self, save: Any) -> None:
        self.flushes += 1

    def keep_examples(self, x: Any, y: Any) -> None:
        self.examples = (x, y)


def test_a_new_pass_over_the_training_data_is_a_report_point_and_validation_gives_the_example() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    train = DataLoader(TensorDataset(torch.randn(8, 3), torch.zeros(8)), batch_size=4)
    val = DataLoader(TensorDataset(torch.randn(6, 3), torch.ones(6)), batch_size=6)
    points = Points()
    with contextlib.ExitStack() as stack:
        hooks.loaders(stack, hooks.Epochs(points, lambda folder: None))  # type: ignore[arg-type]
        for _epoch in range(3):
            list(train)
            list(val)
    assert points.flushes == 2, "epochs 2 and 3 start a report point; the script's end makes the last"
    assert points.examples is not None and tuple(points.examples[0].shape) == (6, 3)
    assert DataLoader.__iter__ is not None and "hooks" not in DataLoader.__iter__.__module__, "undone after"


def test_a_restored_optimizer_and_scheduler_take_the_trials_learning_rate() -> None:
    import torch

    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    with contextlib.ExitStack() as stack:
        hooks.restored_lr(stack, 0.5)
        opt2 = torch.optim.SGD(net.parameters(), lr=0.1)
        sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=10)
        opt2.load_state_dict(saved_opt)
        sched2.load_state_dict(saved_sched)
    assert opt2.param_groups[0]["lr"] == 0.5 and sched2.base_lrs == [0.5]
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[0]["lr"] == 0.1, "undone after the run"


def test_the_scripts_mlflow_metrics_go_to_the_report_and_its_runs_to_a_scratch_store(tmp_path: Path) -> None:
    import mlflow

    rep = Reporter("torch", "val_loss", 0, 1, 1, None)
    before = mlflow.get_tracking_uri()
    work = tmp_path / "run" / "work"
    work.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        hooks.mlflow_calls(stack, rep, str(tmp_path / "run" / "mlruns"))
        with mlflow.start_run():
            mlflow.log_params({"lr": 0.1})
            mlflow.log_metrics({"val_loss": 0.25, "val_acc": 0.5}, step=0)
            mlflow.log_metric("train_loss", 1.5)
    assert rep.pending == {"val_loss": 0.25, "val_acc": 0.5, "train_loss": 1.5}
    assert (tmp_path / "run" / "mlruns").is_dir(), "the script's own run went to the scratch store"
    assert mlflow.get_tracking_uri() == before


def test_sweeps_report_is_a_no_op_outside_a_sweep_and_feeds_the_report_inside() -> None:
    import sweeps

    sweeps.report({"val_loss": 1.0})  # nothing to report to: nothing happens
    with Reporter("torch", "val_loss", 0, 1, 1, None) as rep:
        sweeps.report({"val_loss": 0.5, "note": "text"})
    assert rep.pending == {"val_loss": 0.5}


def test_restore_hands_back_a_switch_or_the_saved_state_path(tmp_path: Path) -> None:
    from ray.train import Checkpoint

    ckpt = tmp_path / "ckpt"
    (ckpt / META_DIR).mkdir(parents=True)
    (ckpt / launch.WORK / "out").mkdir(parents=True)
    (ckpt / launch.WORK / "out" / "state.pt").write_text("x")
    (ckpt / META_DIR / STATE_FILE).write_text(json.dumps({"framework": "torch", "resume": "out/state.pt"}))
    path_spec = ScriptSpec(framework="torch", path="/p/t.py", flags={"ckpt": "--ckpt"}, resume="ckpt")
    work = tmp_path / "w1"
    work.mkdir()
    resume, spot = launch.restore(Checkpoint.from_directory(str(ckpt)), path_spec, str(work), "t1")
    assert resume == str(work / "out/state.pt") and spot.preemptions == 0  # no note: not a preemption
    assert (work / "out" / "state.pt").read_text() == "x"
    switch_spec = ScriptSpec(framework="torch", path="/p/t.py", switches={"resume": "--resume"}, resume="resume")
    work2 = tmp_path / "w2"
    work2.mkdir()
    assert launch.restore(Checkpoint.from_directory(str(ckpt)), switch_spec, str(work2), "t1")[0] == ""
    no_option = ScriptSpec(framework="torch", path="/p/t.py")
    assert launch.restore(Checkpoint.from_directory(str(ckpt)), no_option, str(tmp_path / "w3"), "t1")[0] is None


def test_a_failing_script_quotes_its_last_lines(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import sys\nprint('loading data')\nprint('bad shape', file=sys.stderr)\nsys.exit(3)\n")
    log = tmp_path / "script.log"
    with launch._teed(str(log)), pytest.raises(launch.ScriptFailed) as err:
        launch._run(ScriptSpec(framework="torch", path=str(script)), str(script), str(log))
    assert "exited with status 3" in str(err.value) and "bad shape" in str(err.value)
    ok = tmp_path / "ok.py"
    ok.write_text("import sys\nsys.exit(0)\n")
    launch._run(ScriptSpec(framework="torch", path=str(ok)), str(ok), str(log))


def test_the_script_sees_a_torchrun_launch(tmp_path: Path) -> None:
    class Ctx:
        def get_local_world_size(self) -> int:
            return 2

        def get_node_rank(self) -> int:
            return 0

    work = tmp_path / "work"
    work.mkdir()
    with launch._launched(["t.py", "--lr", "0.1"], str(work), str(tmp_path / "t.py"), 1, 2, 1, Ctx()):
        seen = (dict(os.environ), list(sys.argv), os.getcwd(), sys.path[0])
    env, args, cwd, path0 = seen
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("1", "2", "1", "2")
    assert "MASTER_ADDR" in env and args == ["t.py", "--lr", "0.1"]
    assert cwd == str(work) and path0 == str(tmp_path)
    assert os.getcwd() != str(work) and sys.argv != args


def test_hf_saves_are_aligned_to_its_evaluations(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "mine"), eval_strategy="steps", eval_steps=50,
                             save_strategy="steps", save_steps=200, use_cpu=True, report_to="none")
    state = hooks.RunState("hf", str(tmp_path / "work"), None, None)
    hooks._align(args, state)
    assert (str(args.save_strategy.value), args.save_steps) == ("steps", 50)
    assert args.output_dir == state.work and state.notes
    epochs = TrainingArguments(output_dir="x", eval_strategy="epoch", save_strategy="no", use_cpu=True)
    hooks._align(epochs, state)
    assert str(epochs.save_strategy.value) == "epoch"


def test_a_script_that_never_logged_the_metric_says_what_it_logged() -> None:
    rep = Reporter("torch", "val_loss", 0, 1, 1, None)
    rep.seen = {"train_loss": 0.5}
    with pytest.raises(RuntimeError, match="the script logged no 'val_loss' \\(it logged train_loss; 0 report"):
        rep.check_logged()
    Reporter("torch", "val_loss", 1, 2, 1, None).check_logged()  # only rank 0 judges


def test_a_node_without_the_project_folder_runs_the_copy_the_sweep_carries(tmp_path: Path) -> None:
    text = "print('hello')\n"
    spec = ScriptSpec(framework="torch", path="/not/on/this/node/train.py", source=text)
    copy = launch.script_file(spec, str(tmp_path))
    assert copy == str(tmp_path / "train.py") and Path(copy).read_text() == text
    with pytest.raises(FileNotFoundError, match="carries no copy"):
        launch.script_file(ScriptSpec(framework="torch", path="/not/here.py"), str(tmp_path))


def test_stale_run_folders_of_gone_workers_are_pruned(tmp_path: Path) -> None:
    import socket

    gone, alive = tmp_path / "t1-aaaa" / "rank0", tmp_path / "t2-bbbb" / "rank0"
    for folder, pid in ((gone, 2**22 + 12345), (alive, os.getpid())):
        folder.mkdir(parents=True)
        (folder / launch.OWNER).write_text(f"{socket.gethostname()} {pid}")
    launch.prune_stale(str(tmp_path))
    assert not gone.parent.exists() and alive.exists()
