"""``sweeps new trainable NAME``: the files of a new trainable, ready to sweep.

Writes, into the project folder (the current one, or ``--dir``; never an installed package), ``NAME.py``
(``trainables/NAME.py`` in a clone of this repo): a complete Ray Train loop in the style of Ray's own docs: resumes with
``ray.train.get_checkpoint()``, one ``state.pt`` checkpoint read back by its ``load_model`` for promotion,
``val/loss`` and ``val/acc`` each epoch),
``conf/trainable/NAME.yaml``, ``search_spaces/NAME.yaml`` and ``conf/experiment/NAME.yaml``. With
``--from pkg.module:function`` the loop is the user's own function and stays in their own package
(:mod:`sweeps.ops.adopt`): the trainable's config points at it, the experiment allows that one module
(``security.allowed_targets``), ``NAME.py`` holds only what promotion needs, and a cluster sweep ships the
package to the nodes like ``trainables``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sweeps.errors import BadInput

NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
FROM = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*$")

LOOP = '''"""{name}: a small MLP on scikit-learn's wine data, written like Ray Train's own examples.

Made by `python -m sweeps new trainable {name}`: edit the model, the data and the loop; keep the contract
(train_loop(config) on every worker, one ray.train.report per epoch, resume from ray.train.get_checkpoint()).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

NUM_FEATURES, NUM_CLASSES = 13, 3


def build_model(config: dict[str, Any]) -> Any:
    """The network (on standardized features)."""
    from torch import nn

    hidden = int(config.get("hidden_size", 32))
    return nn.Sequential(nn.Linear(NUM_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES))


def split(seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """Raw wine features and labels, as scikit-learn gives them: (x_train, y_train, x_val, y_val) arrays."""
    from sklearn.datasets import load_wine
    from sklearn.model_selection import train_test_split

    x, y = load_wine(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    return x_tr, y_tr, x_va, y_va


def load_data(seed: int = 0) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """Standardized features and labels as tensors, and the scaler (the training split's mean and std)."""
    import torch

    x_tr, y_tr, x_va, y_va = split(seed)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-8
    f = lambda a: torch.tensor((a - mean) / std, dtype=torch.float32)  # noqa: E731
    scaler = {{"mean": torch.tensor(mean), "std": torch.tensor(std)}}
    return f(x_tr), torch.tensor(y_tr), f(x_va), torch.tensor(y_va), scaler


def load_model(checkpoint_dir: str, config: dict[str, Any]) -> Any:
    """What `sweeps promote` reads a checkpoint with: state.pt -> the network behind its saved scaler, so the
    registered model takes raw feature rows."""
    import torch

    from trainables.common import ServableModel, standardized

    state = torch.load(os.path.join(checkpoint_dir, "state.pt"), weights_only=True)
    net = build_model(config)
    net.load_state_dict(state["model"])
    return ServableModel(module=standardized(net.eval(), state["scaler"]["mean"], state["scaler"]["std"]),
                         task="classification", columns=tuple(f"feature_{{i}}" for i in range(NUM_FEATURES)),
                         labels=tuple(range(NUM_CLASSES)))


def validation_data() -> tuple[Any, Any]:
    """Raw held-out rows and their labels: what `sweeps promote` scores the registered model on."""
    _, _, x_va, y_va = split()
    return x_va, y_va


def train_loop(config: dict[str, Any]) -> None:
    """Runs on every Ray Train worker."""
    import ray.train
    import ray.train.torch
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    x_tr, y_tr, x_va, y_va, scaler = load_data(int(config.get("seed", 0)))
    loader = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(x_tr, y_tr), batch_size=int(config.get("batch_size", 32)), shuffle=True))
    model = ray.train.torch.prepare_model(build_model(config))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(config["lr"]))
    loss_fn = torch.nn.CrossEntropyLoss()
    start = 0
    checkpoint = ray.train.get_checkpoint()  # a PBT donor's, a retry's or a resumed trial's
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        getattr(model, "module", model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = float(config["lr"])  # the trial's own (maybe mutated) lr, not the donor's
        start = int(state["epoch"]) + 1
    for epoch in range(start, int(config.get("epochs", 5))):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            out = model(x_va)
            metrics = {{"val/loss": float(loss_fn(out, y_va)), "val/acc": float((out.argmax(1) == y_va).float().mean()),
                       "epoch": epoch}}
        with tempfile.TemporaryDirectory() as d:
            saved = None
            if ray.train.get_context().get_world_rank() == 0:
                torch.save({{"model": getattr(model, "module", model).state_dict(),
                            "optimizer": optimizer.state_dict(), "epoch": epoch, "scaler": scaler}},
                           os.path.join(d, "state.pt"))
                saved = ray.train.Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=saved)
'''

TRAINABLE = """# The trainable {name}: {how}.
name: {name}
loop: {loop}
builder: {builder}
load_model: {load_model}  # load_model(checkpoint_dir, config): how `sweeps promote` reads a checkpoint
metrics: {metrics}
num_workers: 1
in_process: auto   # a 1-worker CPU trial trains in its trial's own process, reused for the next; false: a worker group
use_gpu: false
pack: 1            # K > 1: K single-worker trials share each GPU (each keeps 1/K of its memory)
resources_per_worker: {{CPU: 1}}
placement_strategy: PACK
checkpoint_every: 1
params:{params}
"""
OWN_METRICS = "[val/loss, val/acc, epoch]"
OWN_PARAMS = "\n  epochs: 5\n  batch_size: 32\n  hidden_size: 32\n  lr: 0.01"

SPACE = """# The search space of {where}: edit freely (python -m sweeps run --help lists the dists).
lr: {{dist: loguniform, low: 1.0e-3, high: 1.0e-1}}
hidden_size: {{dist: choice, values: [16, 32, 64]}}
"""

EXPERIMENT = """# @package _global_
# {name}: `python -m sweeps run +experiment={name}` (made by `python -m sweeps new trainable {name}`).
defaults:
  - override /trainable: {name}
  - override /search_space: {name}
  - override /scheduler: asha

sweep:
  name: {name}
  num_samples: 4
  max_concurrent_trials: 2
{objective}{security}"""


@dataclass(frozen=True)
class Scaffold:
    files: dict[Path, str]
    experiment: str
    notes: list[str] = field(default_factory=list)  # what the scaffold found, and what it could not


def code_home(root: Path, name: str) -> tuple[Path, str]:
    """Where a new trainable's module goes and its dotted name: ``trainables/NAME.py`` in a checkout of this
    repo (``sweeps/`` and ``trainables/`` side by side: its ``trainables`` package is the one Python imports
    there), else ``NAME.py`` in the project folder."""
    package = root / "trainables"
    if (package / "__init__.py").is_file() and (root / "sweeps" / "__init__.py").is_file():
        return package / f"{name}.py", f"trainables.{name}"
    return root / f"{name}.py", name


def _free_module_name(root: Path, name: str, dotted: str) -> None:
    """A project module may not take the name of one Python imports from elsewhere (it would shadow it)."""
    import importlib.util

    if "." in dotted:
        return
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None) if spec else None
    if spec is not None and not (origin and Path(origin).resolve().parent == root):
        raise BadInput(f"NAME: a module named {name!r} exists already ({origin or 'built in'}); a trainable of that "
                       f"name would shadow it: pick another name")


def plan(name: str, source: str | None = None, root: Path | None = None, script: str | None = None,
         fixed: list[str] | None = None) -> Scaffold:
    """The files to write into the project folder ``root`` (nothing is written): BadInput for a bad name, an
    existing trainable or ``--from``, or a folder inside an installed package. ``script`` (with its fixed
    arguments): a training script swept as it is (:mod:`sweeps.ops.scriptscaffold`)."""
    from sweeps.ops import project

    if not NAME.match(name or ""):
        raise BadInput(f"NAME: {name!r} is not a trainable name; use lowercase letters, digits and _ (a Python "
                       f"module name), e.g. `python -m sweeps new trainable my_mlp`")
    root = project.target(root)
    project.refuse_shadowing(root)
    module, dotted = code_home(root, name)
    as_script = script is not None or (source is not None and _is_entry_point(source))
    files = {module: "", root / "conf" / "trainable" / f"{name}.yaml": "",
             root / "search_spaces" / f"{name}.yaml": "", root / "conf" / "experiment" / f"{name}.yaml": ""}
    if as_script:
        del files[module]  # the script is the code: no module of our own
    taken = [str(p) for p in files if p.exists()]
    if taken:
        raise BadInput(f"NAME: trainable {name!r} exists already ({', '.join(taken)}); pick another name")
    if as_script:
        return _script(name, root, files, script, source, fixed or [])
    _free_module_name(root, name, dotted)
    own = "" if dotted.startswith("trainables.") else name
    if source is None:
        security = f"\nsecurity:\n  allowed_targets: [{own}]  # the project's own module\n" if own else ""
        texts = [LOOP.format(name=name), TRAINABLE.format(name=name, loop=f"{dotted}.train_loop",
                                                          builder=f"{dotted}.build_model",
                                                          load_model=f"{dotted}.load_model",
                                                          how="made by `python -m sweeps new trainable`",
                                                          metrics=OWN_METRICS, params=OWN_PARAMS),
                 SPACE.format(name=name, where=module.name), EXPERIMENT.format(name=name, objective="",
                                                                            security=security)]
        return Scaffold(dict(zip(files, texts, strict=True)), name)
    from sweeps.ops import adopt

    if not FROM.match(source):
        raise BadInput(f"--from: {source!r} is not pkg.module:function (or pkg.module.function)")
    a = adopt.adopt(name, source)
    security = a.security.replace("allowed_targets: [", f"allowed_targets: [{own}, ") if own else a.security
    texts = [a.stub, TRAINABLE.format(name=name, loop=a.loop, builder="null", how=f"your own {source}",
                                      load_model=f"{dotted}.load_model", metrics=a.metrics,
                                      params=a.params),
             a.space, EXPERIMENT.format(name=name, objective=a.objective, security=security)]
    return Scaffold(dict(zip(files, texts, strict=True)), name)


def _is_entry_point(source: str) -> bool:
    """``--from pkg.module:main`` names a script's entry point (it parses sys.argv) when the function takes no
    parameters; a training function takes its config."""
    import ast

    from sweeps.config import loopsource

    module, _, func = source.replace(":", ".").rpartition(".")
    try:
        tree = ast.parse(loopsource.locate(module).read_text(encoding="utf-8"))
    except Exception:  # unreadable: adopt() says why
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == func:
            a = node.args
            return not (a.posonlyargs or a.args or a.vararg or a.kwonlyargs)
    return False


def _script(name: str, root: Path, files: dict[Path, str], script: str | None, source: str | None,
            fixed: list[str]) -> Scaffold:
    from sweeps.config import loopsource
    from sweeps.ops import scriptscaffold

    path = script
    if path is None:  # an entry point: read the module's file, run it as pkg.module:function
        assert source is not None
        module = source.replace(":", ".").rpartition(".")[0]
        path = str(loopsource.locate(module))
    p = scriptscaffold.plan(name, path, fixed, root)
    if script is None:
        entry = source if source and ":" in source else ":".join(str(source).rsplit(".", 1))
        p.trainable = p.trainable.replace("  path: ", f"  entry: {entry}  # ").replace(
            "# relative to the project folder", "# (read from here)", 1).replace(
            f"--script {path}", f"--from {source}", 1)
    return Scaffold(dict(zip(files, [p.trainable, p.space, p.experiment], strict=True)), name, p.notes)


def write(scaffold: Scaffold) -> list[Path]:
    for path, text in scaffold.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(scaffold.files)
