"""The scan's result: the dataclasses Param, Metric and ScriptScan, and the frameworks and parsers it names.

INTERFACE (fixed; the scaffold and the run-time adapter rely on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FRAMEWORKS = ("lightning", "hf", "accelerate", "torch")  # torch: a plain / torchrun-style script
PARSERS = ("argparse", "hf", "lightningcli")


@dataclass(frozen=True)
class Param:
    """One option of the script's command line."""

    name: str  # the key in the sweep's config and search space (argparse dest; dataclass field; LightningCLI:
    #           the argument name without its group, e.g. "lr" for --model.lr; "<group>_<name>" on a clash)
    flag: str  # how argv spells it, exactly as the parser defines it: "--batch-size", "--learning_rate",
    #           "--model.lr" (the first long option string of an argparse argument)
    kind: str  # "int" | "float" | "str" | "bool" (takes a value: HF bool fields, type=bool-ish) |
    #           "switch" (store_true: the flag alone turns it on) | "switch_off" (store_false) | "other"
    default: Any = None  # the literal default (ast.literal_eval-able), else None
    choices: tuple[Any, ...] | None = None  # literal choices, else None
    where: str = ""  # where it was read, for the scaffold's comments: "argparse --lr (line 12)",
    #                  "TrainingArguments.learning_rate (transformers' default)", "LitModel.__init__(lr) (line 20)"


@dataclass(frozen=True)
class Metric:
    name: str  # as it reaches the sweep: Lightning's self.log name; HF: "eval_" + compute_metrics key, and
    #            "eval_loss"; mlflow.log_metric(s) keys; accelerator.log keys; SummaryWriter.add_scalar tags;
    #            sweeps.report keys
    where: str  # "self.log (line 40)", "compute_metrics -> eval_accuracy (line 70)", "mlflow.log_metrics (line 90)"


@dataclass(frozen=True)
class ScriptScan:
    framework: str  # one of FRAMEWORKS, from its imports (lightning / pytorch_lightning; transformers Trainer;
    #                 accelerate Accelerator; else torch)
    framework_where: str  # "import lightning.pytorch (line 3)"
    parser: str | None  # one of PARSERS, or None: the script reads no command line the scan can see
    params: tuple[Param, ...] = ()
    metrics: tuple[Metric, ...] = ()
    epochs: Param | None = None  # the script's own epoch budget option (--max-epochs, --max_epochs,
    #                               --num_train_epochs, --epochs, --n-epochs, --trainer.max_epochs)
    output: Param | None = None  # its output-folder option (--output-dir/--output_dir/--out-dir/--save-dir/
    #                               --checkpoint-dir/--default-root-dir/--log-dir ...)
    resume: Param | None = None  # its resume option (--resume-from(-checkpoint), --resume_from_checkpoint,
    #                               --ckpt-path, --ckpt_path, --resume (a path-taking one))
    lr: Param | None = None  # the optimizer's learning rate option (lr, learning_rate, --model.lr ...)
    model_class: str | None = None  # Lightning: the LightningModule subclass the script defines; HF: None;
    #                                 torch/accelerate: the nn.Module subclass it trains (the one constructed
    #                                 and wrapped in DDP / accelerator.prepare), if found
    model_build: str | None = None  # torch/accelerate: the call that builds it, rewritten in terms of the config:
    #                                 "WineNet(hidden=config['hidden'])"; None when any argument is not a
    #                                 literal or a parsed option (args.X)
    saved_file: str | None = None  # torch: the file name its torch.save(model(.module).state_dict(), ...) writes
    #                                into the output folder ("model.pt"), when readable
    reports_itself: bool = False  # calls sweeps.report(...)
    problems: tuple[str, ...] = field(default=())  # what could not be read, each a sentence for the scaffold
    subcommand: str | None = None  # LightningCLI (without run=False): "fit", the fixed first argument it needs
