"""A user's training script, read without running it: its framework, parser, metrics, epochs and model.

``sweeps new trainable NAME --script PATH`` (and ``--from pkg.module:main``) reads the script's source with
:mod:`ast` (never importing it) and says, for every value it writes into the scaffold, where it came from. Pure:
text in, a :class:`ScriptScan` out; nothing here imports the frameworks.

INTERFACE (fixed; the scaffold and the run-time adapter rely on it): see the dataclasses and :func:`scan`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
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


# --- the names that make an option special -----------------------------------------------------------------------
EPOCH_NAMES = ("max_epochs", "num_train_epochs", "epochs", "n_epochs", "num_epochs")
OUTPUT_NAMES = ("output_dir", "out_dir", "save_dir", "checkpoint_dir", "default_root_dir", "log_dir", "ckpt_dir",
                "outdir")
VALUE_KINDS = frozenset({"str", "other"})
RESUME_RULES = (("resume_from_checkpoint", VALUE_KINDS), ("resume_from", VALUE_KINDS), ("ckpt_path", VALUE_KINDS),
                ("resume", VALUE_KINDS), ("checkpoint", frozenset({"str"})), ("resume", frozenset({"switch"})))
LR_NAMES = ("lr", "learning_rate")
SWITCHES = frozenset({"switch", "switch_off"})

# transformers.TrainingArguments: the knobs a sweep turns, with transformers' defaults
TRAINING_ARGUMENTS: tuple[tuple[str, str, Any], ...] = (
    ("learning_rate", "float", 5e-5), ("weight_decay", "float", 0.0), ("warmup_ratio", "float", 0.0),
    ("num_train_epochs", "float", 3.0), ("per_device_train_batch_size", "int", 8), ("seed", "int", 42),
    ("output_dir", "str", None), ("resume_from_checkpoint", "str", None))

# evaluate.load(NAME).compute(...) returns {NAME: value} for these
EVALUATE_SAME_KEY = frozenset({"accuracy", "f1", "precision", "recall", "mse", "mae", "matthews_correlation",
                               "pearsonr", "spearmanr", "exact_match"})

LIGHTNING_ROOTS = frozenset({"lightning", "pytorch_lightning"})
HF_TRAINER = re.compile(r"^transformers(\.\w+)*\.\w*Trainer$")
WRAPPERS = frozenset({"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "DataParallel",
                      "prepare", "prepare_model"})
MOVES = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train"})  # model.to(device) is model
DEPTH = 4  # how many assignments, returns and calls a value is followed through

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_NOT_LITERAL: Any = object()


# --- small readers -------------------------------------------------------------------------------------------------
def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _literal(node: ast.AST | None) -> Any:
    """``ast.literal_eval`` of ``node``, or ``_NOT_LITERAL``."""
    if node is None:
        return _NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except Exception:  # ValueError, TypeError, RecursionError...: any of them means "not a literal"
        return _NOT_LITERAL


def _or_none(value: Any) -> Any:
    return None if value is _NOT_LITERAL else value


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    """The argument at ``index``, else the keyword ``name``."""
    return call.args[index] if len(call.args) > index else _kw(call, name)


def _last(expr: ast.AST | None) -> str | None:
    """``x`` of ``x`` and of ``a.b.x``."""
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None


def _text(node: ast.AST, limit: int = 80) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # a tree too deep to unparse
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _value_kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str"}.get(type(value), "other")


def _choices(node: ast.AST | None) -> tuple[Any, ...] | None:
    value = _literal(node)
    if isinstance(value, list | tuple):
        return tuple(value)
    if isinstance(value, set | frozenset):
        return tuple(sorted(value, key=repr))
    return None


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


# --- the source, indexed -------------------------------------------------------------------------------------------
class _Source:
    """A parsed script: its imports (local name -> dotted name), classes, functions and calls in source order."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        nodes = list(ast.walk(tree))
        self.parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
        self.import_statements = sorted((n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)), key=_line)
        self.imports: dict[str, tuple[str, ast.Import | ast.ImportFrom]] = {}
        for statement in self.import_statements:
            for local, dotted in _bindings(statement):
                self.imports.setdefault(local, (dotted, statement))
        self.classes: dict[str, ast.ClassDef] = {}
        self.functions: dict[str, _Function] = {}
        for node in sorted((n for n in nodes if isinstance(n, ast.ClassDef | _Function)), key=_position):
            table: dict[str, Any] = self.classes if isinstance(node, ast.ClassDef) else self.functions
            table.setdefault(node.name, node)
        self.calls = sorted((n for n in nodes if isinstance(n, ast.Call)), key=_position)
        self.names = [n for n in nodes if isinstance(n, ast.Name | ast.Attribute)]

    def qualname(self, expr: ast.AST | None) -> str | None:
        """The dotted name ``expr`` stands for, through the imports: ``pl.Trainer`` -> ``lightning.pytorch.Trainer``."""
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        root = self.imports[expr.id][0] if expr.id in self.imports else expr.id
        return ".".join([root, *reversed(parts)])

    def import_of(self, expr: ast.AST) -> tuple[ast.Import | ast.ImportFrom | None, str]:
        """The import statement that binds the root name of ``expr``, and that name."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id not in self.imports:
            return None, ""
        return self.imports[expr.id][1], expr.id

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) ``node`` is in."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, _Function):
            parent = self.parents.get(parent)
        return parent if parent is not None else self.tree

    def assigned(self, name: str, scope: ast.AST) -> list[ast.expr]:
        """The values ``name = ...`` assigns in ``scope``, in source order."""
        out: list[tuple[tuple[int, int], ast.expr]] = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                out.append((_position(node), node.value))
            elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
                  and node.value is not None):
                out.append((_position(node), node.value))
        return [value for _, value in sorted(out, key=lambda pair: pair[0])]

    def subclasses(self, cls: ast.ClassDef, base_name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``cls`` derives from a class whose last name is ``base_name``, through the script's classes."""
        for base in cls.bases:
            last = _last(base)
            if last == base_name:
                return True
            inner = self.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
            if inner is not None and inner is not cls and self.subclasses(inner, base_name, seen | {last or ""}):
                return True
        return False


def _bindings(statement: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            yield (alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0], alias.name.split(".")[0])
        return
    module = "." * statement.level + (statement.module or "")
    for alias in statement.names:
        if alias.name != "*":
            yield alias.asname or alias.name, f"{module}.{alias.name}" if module else alias.name


def _modules(statement: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names]
    return [statement.module] if statement.module and not statement.level else []


def _where(statement: ast.Import | ast.ImportFrom, keep: Any = None) -> str:
    """``import lightning.pytorch as pl (line 3)``: the statement with only the aliases ``keep(alias)`` accepts
    (all of them when it accepts none)."""
    names = [a for a in statement.names if keep is None or keep(a)] or statement.names
    shown = ast.Import(names=names) if isinstance(statement, ast.Import) else \
        ast.ImportFrom(module=statement.module, names=names, level=statement.level)
    return f"{_text(shown, 100)} (line {_line(statement)})"


# --- framework -----------------------------------------------------------------------------------------------------
def _framework(src: _Source) -> tuple[str, str]:
    for statement in src.import_statements:
        if any(m.split(".")[0] in LIGHTNING_ROOTS for m in _modules(statement)):
            return "lightning", _where(statement, lambda a: a.name.split(".")[0] in LIGHTNING_ROOTS)
    for wanted, framework in ((HF_TRAINER.match, "hf"), ("accelerate.Accelerator".__eq__, "accelerate")):
        for node in src.names:
            qualname = src.qualname(node)
            if qualname and wanted(qualname):
                imported, local = src.import_of(node)
                return framework, (_where(imported, lambda a, local=local: (a.asname or a.name.split(".")[0]) == local)
                                   if imported is not None else f"{qualname} (line {_line(node)})")
    torch = next((s for s in src.import_statements if any(m.split(".")[0] == "torch" for m in _modules(s))), None)
    if torch is None:
        return "torch", "no Lightning, transformers Trainer or Accelerator import"
    return "torch", _where(torch, lambda a: a.name.split(".")[0] == "torch")


# --- argparse ------------------------------------------------------------------------------------------------------
def _type_kind(node: ast.expr | None, default: Any) -> str:
    name = _last(node)
    if node is None or name == "str":
        return _value_kind(default) or "str"
    if name in ("int", "float"):
        return name
    if name is not None and "bool" in name.lower():  # type=bool, type=str2bool: takes a value
        return "bool"
    return "other"


def _argparse_kind(call: ast.Call) -> tuple[str, Any]:
    """The kind and default of one ``add_argument`` call."""
    action_node = _kw(call, "action")
    action = _str(action_node)
    default = _literal(_kw(call, "default"))
    if action == "store_true":
        return "switch", False if default is _NOT_LITERAL else default
    if action == "store_false":
        return "switch_off", True if default is _NOT_LITERAL else default
    default = _or_none(default)
    nargs = _kw(call, "nargs")
    if (action_node is not None and action != "store") or (nargs is not None and _literal(nargs) != "?"):
        return "other", default  # append, count, store_const, BooleanOptionalAction, lists
    return _type_kind(_kw(call, "type"), default), default


def _argparse_param(call: ast.Call) -> tuple[Param | None, str | None]:
    """One ``add_argument`` call's Param, and a problem sentence (a positional, computed names)."""
    line = _line(call)
    strings = [_str(a) for a in call.args]
    names = [s for s in strings if s]
    if not names or len(names) < len(strings):
        return None, f"an add_argument call with computed option names (line {line}) was skipped"
    kind, default = _argparse_kind(call)
    choices = _choices(_kw(call, "choices"))
    dest = _str(_kw(call, "dest"))
    options = [s for s in names if s.startswith("-")]
    if not options:
        name = dest or names[0].replace("-", "_")
        where = f"argparse {names[0]} (line {line})"
        return (Param(name, "", kind, default, choices, where),
                f"the positional argument {names[0]} (line {line}) is passed as one of the FIXED ARGS, not swept")
    flag = next((o for o in options if o.startswith("--")), options[0])
    name = dest or flag.lstrip("-").replace("-", "_")
    return Param(name, flag, kind, default, choices, f"argparse {flag} (line {line})"), None


def _argparse_params(src: _Source) -> tuple[list[Param], list[str]]:
    params: list[Param] = []
    problems: list[str] = []
    for call in src.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            param, problem = _argparse_param(call)
            params += [param] if param is not None else []
            problems += [problem] if problem else []
    return params, problems


# --- annotations (HF dataclasses, LightningCLI __init__) ----------------------------------------------------------
def _annotation_kind(annotation: ast.expr | None, depth: int = 0) -> tuple[str, tuple[Any, ...] | None]:
    """The kind an annotation gives, and a ``Literal[...]``'s values as choices."""
    if annotation is None or depth > DEPTH:
        return "other", None
    text = _str(annotation)
    if text is not None:  # a string annotation: "int"
        try:
            return _annotation_kind(ast.parse(text, mode="eval").body, depth + 1)
        except SyntaxError:
            return "other", None
    if isinstance(annotation, ast.Name | ast.Attribute):
        last = _last(annotation)
        return (last, None) if last in ("int", "float", "str", "bool") else ("other", None)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union([annotation.left, annotation.right], depth)
    if isinstance(annotation, ast.Subscript):
        head, inner = _last(annotation.value), annotation.slice
        if head == "Optional":
            return _annotation_kind(inner, depth + 1)
        if head == "Union":
            return _union(inner.elts if isinstance(inner, ast.Tuple) else [inner], depth)
        if head == "Literal":
            values = _literal(inner)
            values = values if isinstance(values, tuple) else (values,)
            kinds = {_value_kind(v) for v in values}
            return (kinds.pop() or "other") if len(kinds) == 1 else "other", values
    return "other", None


def _union(members: list[ast.expr], depth: int) -> tuple[str, tuple[Any, ...] | None]:
    flat: list[ast.expr] = []
    for member in members:  # X | Y | None nests to the left
        if isinstance(member, ast.BinOp) and isinstance(member.op, ast.BitOr):
            flat += [member.left, member.right]
        else:
            flat.append(member)
    rest = [m for m in flat if not (isinstance(m, ast.Constant) and m.value is None) and _last(m) != "None"]
    return _annotation_kind(rest[0], depth + 1) if len(rest) == 1 else ("other", None)


# --- HfArgumentParser ----------------------------------------------------------------------------------------------
def _is_training_arguments(qualname: str | None) -> bool:
    return bool(qualname) and str(qualname).rsplit(".", 1)[-1].endswith("TrainingArguments")


def _training_arguments() -> dict[str, Param]:
    """The knobs the installed transformers' ``TrainingArguments`` has (a release drops some: 5.x has no
    ``warmup_ratio``), with its defaults; the table's own where transformers is not installed."""
    installed = _installed_training_arguments()
    out = {}
    for name, kind, default in TRAINING_ARGUMENTS:
        if installed is not None:
            if name not in installed:
                continue
            default = installed[name] if installed[name] is not None or default is None else default
        out[name] = Param(name, f"--{name}", kind, default, None, f"TrainingArguments.{name} (transformers' default)")
    return out


def _installed_training_arguments() -> dict[str, Any] | None:
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return None
    try:
        from transformers import TrainingArguments
    except Exception:  # a broken install: the table stands
        return None
    return {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(TrainingArguments)}


def _field_value(value: ast.expr | None) -> tuple[Any, tuple[Any, ...] | None, bool]:
    """A dataclass field's default, its metadata choices, and whether it is an ``__init__`` field."""
    if value is None:
        return None, None, True
    if isinstance(value, ast.Call) and _last(value.func) == "field":
        metadata = _kw(value, "metadata")
        choices = next((_choices(v) for k, v in zip(metadata.keys, metadata.values, strict=True)
                        if _str(k) == "choices"), None) if isinstance(metadata, ast.Dict) else None
        return _or_none(_literal(_kw(value, "default"))), choices, _literal(_kw(value, "init")) is not False
    return _or_none(_literal(value)), None, True


def _field_param(owner: str, statement: ast.stmt) -> Param | None:
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
        return None
    if "ClassVar" in _text(statement.annotation):
        return None
    kind, choices = _annotation_kind(statement.annotation)
    default, field_choices, init = _field_value(statement.value)
    name = statement.target.id
    return Param(name, f"--{name}", kind, default, choices or field_choices,
                 f"{owner}.{name} (line {_line(statement)})") if init else None


def _dataclass_params(src: _Source, cls: ast.ClassDef, seen: frozenset[str]) -> dict[str, Param]:
    """A script dataclass's fields, its script bases' (and TrainingArguments' knobs) first."""
    out: dict[str, Param] = {}
    for base in cls.bases:
        inner = src.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
        if inner is not None:
            out.update(_dataclass_params(src, inner, seen | {inner.name}))
        elif _is_training_arguments(src.qualname(base)):
            out.update(_training_arguments())
    for statement in cls.body:
        param = _field_param(cls.name, statement)
        if param is not None:
            out[param.name] = param
    return out


def _hf_params(src: _Source, call: ast.Call) -> tuple[list[Param], list[str]]:
    types = _arg(call, 0, "dataclass_types")
    if types is None:
        return [], [f"HfArgumentParser (line {_line(call)}) is given no dataclasses sweeps can read"]
    params: dict[str, Param] = {}
    problems: list[str] = []
    for node in types.elts if isinstance(types, ast.Tuple | ast.List) else [types]:
        cls = src.classes.get(node.id) if isinstance(node, ast.Name) else None
        if cls is not None:
            params.update({k: v for k, v in _dataclass_params(src, cls, frozenset({cls.name})).items()
                           if k not in params})
        elif _is_training_arguments(src.qualname(node)):
            params.update({k: v for k, v in _training_arguments().items() if k not in params})
        else:
            problems.append(f"HfArgumentParser's {_text(node)} is not a dataclass of the script: its fields are "
                            "not listed")
    return list(params.values()), problems


# --- LightningCLI --------------------------------------------------------------------------------------------------
def _init_params(src: _Source, cls: ast.ClassDef, seen: frozenset[str]) -> list[tuple[str, Param]]:
    """(parameter name, Param without its final name and flag) for each ``__init__`` parameter but self."""
    init = next((s for s in cls.body if isinstance(s, _Function) and s.name == "__init__"), None)
    if init is None:
        for base in cls.bases:
            inner = src.classes.get(base.id) if isinstance(base, ast.Name) and base.id not in seen else None
            if inner is not None:
                return _init_params(src, inner, seen | {inner.name})
        return []
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    pairs = [*list(zip(positional, defaults, strict=True))[1:], *zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    out: list[tuple[str, Param]] = []
    for arg, default_node in pairs:
        default = _or_none(_literal(default_node))
        kind, choices = _annotation_kind(arg.annotation) if arg.annotation else (_value_kind(default) or "other", None)
        where = f"{cls.name}.__init__({arg.arg}) (line {_line(arg)})"
        out.append((arg.arg, Param(arg.arg, "", kind, default, choices, where)))
    return out


def _cli_params(src: _Source, call: ast.Call) -> tuple[list[Param], list[str], str | None]:
    """The options ``LightningCLI(Model, Data)`` reads, problems, and its subcommand (None with run=False)."""
    groups: list[tuple[str, list[tuple[str, Param]]]] = []
    problems: list[str] = []
    for group, node in (("model", _arg(call, 0, "model_class")), ("data", _arg(call, 1, "datamodule_class"))):
        cls = src.classes.get(node.id) if isinstance(node, ast.Name) else None
        if cls is not None:
            groups.append((group, _init_params(src, cls, frozenset({cls.name}))))
        elif node is not None:
            problems.append(f"LightningCLI's {group} class {_text(node)} is not defined in the script: its "
                            f"--{group}.* options are not listed")
        elif group == "model":
            problems.append(f"LightningCLI (line {_line(call)}) is given no model class: its --model.* options "
                            "are not listed")
    seen: dict[str, int] = {}
    for _, params in groups:
        for bare in dict.fromkeys(bare for bare, _ in params):
            seen[bare] = seen.get(bare, 0) + 1
    out = [Param(f"{group}_{bare}" if seen[bare] > 1 else bare, f"--{group}.{bare}", p.kind, p.default, p.choices,
                 p.where) for group, params in groups for bare, p in params]
    name = "max_epochs" if "max_epochs" not in {p.name for p in out} else "trainer_max_epochs"
    out.append(Param(name, "--trainer.max_epochs", "int", None, None, "LightningCLI trainer.max_epochs"))
    if _literal(_kw(call, "run")) is False:
        return out, problems, None
    problems.append("LightningCLI runs a subcommand: the script is run as `python script.py fit --model.lr ...`, "
                    "`fit` one of the FIXED ARGS")
    return out, problems, "fit"


# --- the parser ----------------------------------------------------------------------------------------------------
NO_PARSER = ("the script reads no command-line options sweeps can see (argparse, HfArgumentParser, LightningCLI): "
             "add a parser for the values to sweep")


def _parser(src: _Source) -> tuple[str | None, list[Param], list[str], str | None]:
    """The parser kind, its options (one per name), problems and the LightningCLI subcommand."""
    def called(suffix: str) -> ast.Call | None:
        return next((c for c in src.calls if (src.qualname(c.func) or "").endswith(suffix)), None)

    argparse_params, problems = _argparse_params(src)
    cli, hf = called("LightningCLI"), called("HfArgumentParser")
    subcommand = None
    if cli is not None:
        kind, (params, more, subcommand) = "lightningcli", _cli_params(src, cli)
        params, problems = params + argparse_params, more + problems
    elif hf is not None:
        kind, (params, more) = "hf", _hf_params(src, hf)
        params, problems = params + argparse_params, more + problems
    elif argparse_params or called("ArgumentParser") is not None:
        kind, params = "argparse", argparse_params
    else:
        return None, [], [NO_PARSER], None
    unique = list({p.name: p for p in reversed(params)}.values())[::-1]  # the first Param of each name
    return kind, unique, problems, subcommand


def _key(param: Param) -> set[str]:
    """The names a Param answers to: its name and its flag's last part (--model.lr -> lr, --max-epochs)."""
    return {param.name, param.flag.lstrip("-").rsplit(".", 1)[-1].replace("-", "_").lower()}


def _pick(params: Iterable[Param], rules: Iterable[tuple[str, frozenset[str] | None]]) -> Param | None:
    params = list(params)
    for name, kinds in rules:
        for param in params:
            if name in _key(param) and (kinds is None or param.kind in kinds):
                return param
    return None


def _special(params: list[Param]) -> dict[str, Param | None]:
    not_switch = frozenset({"int", "float", "str", "bool", "other"})
    return {
        "epochs": _pick(params, ((n, not_switch) for n in EPOCH_NAMES)),
        "output": _pick(params, ((n, VALUE_KINDS) for n in OUTPUT_NAMES)),
        "resume": _pick(params, RESUME_RULES),
        "lr": _pick(params, ((n, not_switch) for n in LR_NAMES)),
    }


# --- metrics -------------------------------------------------------------------------------------------------------
class _Metrics:
    """The metric names a script logs, with where, in source order."""

    def __init__(self, src: _Source, framework: str) -> None:
        self.src, self.framework = src, framework
        self.found: list[tuple[tuple[int, int], Metric]] = []
        self.problems: list[str] = []
        self.reports_itself = False
        self.accelerators = {_text(t) for n in ast.walk(src.tree) if isinstance(n, ast.Assign)
                             and isinstance(n.value, ast.Call)
                             and src.qualname(n.value.func) == "accelerate.Accelerator" for t in n.targets}

    def read(self) -> tuple[tuple[Metric, ...], list[str], bool]:
        for call in self.src.calls:
            self._call(call)
        if self.framework == "hf":
            self._hf()
        ordered = [m for _, m in sorted(self.found, key=lambda pair: pair[0])]
        metrics = tuple({m.name: m for m in reversed(ordered)}.values())[::-1]
        if not metrics:
            self.problems.append("the script logs no metric sweeps can see (self.log, compute_metrics, mlflow, "
                                 "accelerator.log, SummaryWriter.add_scalar, sweeps.report)")
        return metrics, self.problems, self.reports_itself

    def _add(self, name: str, where: str, node: ast.AST) -> None:
        self.found.append((_position(node), Metric(name, where)))

    def _call(self, call: ast.Call) -> None:
        func, qualname = call.func, self.src.qualname(call.func) or ""
        receiver = _text(func.value) if isinstance(func, ast.Attribute) else ""
        line = _line(call)
        if qualname == "mlflow.log_metric":
            self._name(_arg(call, 0, "key"), "mlflow.log_metric", call)
        elif qualname == "mlflow.log_metrics":
            self._dict(_arg(call, 0, "metrics"), "mlflow.log_metrics", call)
        elif qualname.startswith("sweeps.") and qualname.endswith(".report"):
            self.reports_itself = True
            self._dict(_arg(call, 0, "metrics"), "sweeps.report", call)
        elif not isinstance(func, ast.Attribute):
            return
        elif func.attr == "log_metric" and len(call.args) > 2:  # MlflowClient().log_metric(run_id, key, value)
            self._name(call.args[1], f"{receiver}.log_metric", call)
        elif func.attr in ("log", "log_dict") and self.framework == "lightning" and receiver in ("self", "pl_module"):
            if func.attr == "log":
                self._name(_arg(call, 0, "name"), f"{receiver}.log", call)
            else:
                self._dict(_arg(call, 0, "dictionary"), f"{receiver}.log_dict", call)
        elif func.attr == "log" and self._accelerator(receiver, call):
            self._dict(_arg(call, 0, "values"), f"{receiver}.log", call)
        elif func.attr == "add_scalar":
            self._name(_arg(call, 0, "tag"), f"{receiver}.add_scalar", call)
        elif func.attr == "add_scalars":
            main = _str(_arg(call, 0, "main_tag"))
            keys, unread = self._keys(_arg(call, 1, "tag_scalar_dict"), self.src.scope(call))
            for key in keys if main is not None else []:
                self._add(f"{main}/{key}", f"{receiver}.add_scalars (line {line})", call)
            if main is None or unread:
                self.problems.append(f"{receiver}.add_scalars (line {line}) logs names sweeps cannot read: sweeps "
                                     "lists only literal names")

    def _accelerator(self, receiver: str, call: ast.Call) -> bool:
        if receiver in self.accelerators or receiver.rsplit(".", 1)[-1] == "accelerator":
            return True
        first = _arg(call, 0, "values")
        return (self.framework == "accelerate" and isinstance(first, ast.Dict)
                and not receiver.startswith(("wandb", "self", "logging", "logger")))

    def _name(self, node: ast.expr | None, label: str, call: ast.Call) -> None:
        name = _str(node)
        if name is not None:
            self._add(name, f"{label} (line {_line(call)})", call)
        else:
            self.problems.append(f"{label} with a computed name (line {_line(call)}): sweeps lists only literal names")

    def _dict(self, node: ast.expr | None, label: str, call: ast.Call) -> None:
        keys, unread = self._keys(node, self.src.scope(call))
        for key in keys:
            self._add(key, f"{label} (line {_line(call)})", call)
        if unread:
            self.problems.append(f"{label} (line {_line(call)}) logs names sweeps cannot read: sweeps lists only "
                                 "literal keys of a dict written in the same function")

    def _keys(self, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> tuple[list[str], bool]:
        """The literal string keys a dict-valued expression holds, and whether some could not be read."""
        if expr is None or depth > DEPTH:
            return [], True
        if isinstance(expr, ast.Dict):
            return self._dict_literal(expr, scope, depth)
        if isinstance(expr, ast.Name):
            return self._variable(expr.id, scope, depth)
        if isinstance(expr, ast.Call):
            return self._dict_call(expr, scope, depth)
        return [], True

    def _dict_literal(self, expr: ast.Dict, scope: ast.AST, depth: int) -> tuple[list[str], bool]:
        keys: list[str] = []
        unread = False
        for key, value in zip(expr.keys, expr.values, strict=True):
            if key is None:  # {**other}
                more, missed = self._keys(value, scope, depth + 1)
                keys, unread = keys + more, unread or missed
            elif _str(key) is not None:
                keys.append(str(_str(key)))
            else:
                unread = True
        return keys, unread

    def _variable(self, name: str, scope: ast.AST, depth: int) -> tuple[list[str], bool]:
        keys: list[str] = []
        unread = False
        values = self.src.assigned(name, scope)
        for value in values:
            more, missed = self._keys(value, scope, depth + 1)
            keys, unread = keys + more, unread or missed
        for node in ast.walk(scope):  # metrics["val/loss"] = ...; metrics.update({...})
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                            and target.value.id == name:
                        key = _str(target.slice)
                        keys += [key] if key is not None else []
                        unread = unread or key is None
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == name):
                for arg in node.args:
                    more, missed = self._keys(arg, scope, depth + 1)
                    keys, unread = keys + more, unread or missed
                keys += [k.arg for k in node.keywords if k.arg]
        return keys, unread or not keys

    def _dict_call(self, call: ast.Call, scope: ast.AST, depth: int) -> tuple[list[str], bool]:
        keys = [k.arg for k in call.keywords if k.arg]
        if _last(call.func) == "dict" and isinstance(call.func, ast.Name):
            unread = False
            for arg in [*call.args, *(k.value for k in call.keywords if not k.arg)]:
                more, missed = self._keys(arg, scope, depth + 1)
                keys, unread = keys + more, unread or missed
            return keys, unread
        if isinstance(call.func, ast.Attribute) and call.func.attr == "compute":  # evaluate.load("accuracy")
            metric = self._evaluate_metric(call.func.value, scope)
            return ([metric], False) if metric in EVALUATE_SAME_KEY else ([], True)
        function = self.src.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is not None:
            return self._returns(function, depth + 1)
        return [], True

    def _evaluate_metric(self, expr: ast.expr, scope: ast.AST) -> str | None:
        values = self.src.assigned(expr.id, scope) or self.src.assigned(expr.id, self.src.tree) \
            if isinstance(expr, ast.Name) else [expr]
        for value in values:
            if isinstance(value, ast.Call) and _last(value.func) in ("load", "load_metric"):
                return _str(_arg(value, 0, "path"))
        return None

    def _returns(self, function: _Function, depth: int = 0) -> tuple[list[str], bool]:
        keys: list[str] = []
        unread = False
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None:
                more, missed = self._keys(node.value, function, depth)
                keys, unread = keys + more, unread or missed
        return keys, unread or not keys

    def _hf(self) -> None:
        functions: list[_Function] = []
        for call in self.src.calls:
            value = _kw(call, "compute_metrics")
            if value is None or (isinstance(value, ast.Constant) and value.value is None):
                continue
            function = self._function(value)
            if function is None:
                self.problems.append(f"compute_metrics={_text(value, 40)} (line {_line(call)}) is no function of "
                                     "the script: its names are not listed")
            elif function not in functions:
                functions.append(function)
        if not functions and "compute_metrics" in self.src.functions:
            functions.append(self.src.functions["compute_metrics"])
        for function in functions:
            self._compute_metrics(function)
        trainer = next((c for c in self.src.calls if self._trainer(c)), None)
        where = f"{_text(trainer.func)} -> eval_loss (line {_line(trainer)})" if trainer else "HF Trainer -> eval_loss"
        self.found.append(((_position(trainer) if trainer else (10**9, 0)), Metric("eval_loss", where)))

    def _trainer(self, call: ast.Call) -> bool:
        if HF_TRAINER.match(self.src.qualname(call.func) or ""):
            return True
        cls = self.src.classes.get(call.func.id) if isinstance(call.func, ast.Name) else None
        return cls is not None and self.src.subclasses(cls, "Trainer")

    def _function(self, value: ast.expr) -> _Function | None:
        if isinstance(value, ast.Call) and _last(value.func) == "partial" and value.args:
            value = value.args[0]
        name = _last(value)
        return self.src.functions.get(name) if name else None

    def _compute_metrics(self, function: _Function) -> None:
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and node.value is not None:
                keys, unread = self._keys(node.value, function)
                for key in keys:
                    name = key if key.startswith("eval_") else f"eval_{key}"
                    self._add(name, f"{function.name} -> {name} (line {_line(node)})", node)
                if unread:
                    self.problems.append(f"{function.name} (line {_line(node)}) returns names sweeps cannot read: "
                                         "sweeps lists only literal keys")


# --- the model -----------------------------------------------------------------------------------------------------
def _args_names(src: _Source) -> set[str]:
    """The names bound to the parsed command line: ``args = parser.parse_args()``, ``args = parse_args()``..."""
    def parsed(expr: ast.expr | None, functions: set[str]) -> bool:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        return isinstance(expr, ast.Call) and (
            _last(expr.func) in ("parse_args", "parse_known_args", "parse_args_into_dataclasses")
            and isinstance(expr.func, ast.Attribute) or (isinstance(expr.func, ast.Name) and expr.func.id in functions))

    functions: set[str] = set()
    for name, function in src.functions.items():
        returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)]
        bound = _bound(function, lambda e: parsed(e, set()))
        if any(parsed(r, set()) or (isinstance(r, ast.Name) and r.id in bound) for r in returns):
            functions.add(name)
    return _bound(src.tree, lambda e: parsed(e, functions)) | {"args"}


def _bound(scope: ast.AST, test: Any) -> set[str]:
    """The names (also tuple-unpacked) assigned a value that passes ``test`` in ``scope``."""
    out: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and test(node.value):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
                out |= {e.id for e in elements if isinstance(e, ast.Name)}
    return out


def _construction(src: _Source, expr: ast.AST | None, scope: ast.AST, classes: set[str],
                  depth: int = 0) -> ast.Call | None:
    """The ``Net(...)`` call an expression handed to DDP/prepare stands for, through assignments and ``.to()``."""
    if expr is None or depth > DEPTH:
        return None
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name) and expr.func.id in classes:
            return expr
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in MOVES:
            return _construction(src, expr.func.value, scope, classes, depth + 1)
        return None
    if isinstance(expr, ast.Name):
        for value in src.assigned(expr.id, scope):
            found = _construction(src, value, scope, classes, depth + 1)
            if found is not None:
                return found
    return None


def _rebuild(expr: ast.expr, args: set[str], options: set[str]) -> str | None:
    """``expr`` as the config rebuilds it: literals kept, ``args.X`` -> ``config['X']``; None for anything else."""
    if _literal(expr) is not _NOT_LITERAL:
        return _text(expr, 10**6)
    if (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in args
            and expr.attr in options):
        return f"config[{expr.attr!r}]"
    if isinstance(expr, ast.List | ast.Tuple):
        parts = [_rebuild(e, args, options) for e in expr.elts]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(str(p) for p in parts)
        return f"[{inner}]" if isinstance(expr, ast.List) else f"({inner}{',' if len(parts) == 1 else ''})"
    return None


def _build(call: ast.Call, args: set[str], options: set[str]) -> str | None:
    """The construction call over the config: ``WineNet(hidden=config['hidden'])``; None if any part is not."""
    parts: list[str] = []
    for arg in call.args:
        part = None if isinstance(arg, ast.Starred) else _rebuild(arg, args, options)
        if part is None:
            return None
        parts.append(part)
    for keyword in call.keywords:
        value = _rebuild(keyword.value, args, options) if keyword.arg else None
        if value is None:
            return None
        parts.append(f"{keyword.arg}={value}")
    return f"{_last(call.func)}({', '.join(parts)})"


def _lightning_model(src: _Source) -> str | None:
    candidates = [name for name, cls in src.classes.items() if src.subclasses(cls, "LightningModule")]
    built = {c.func.id for c in src.calls if isinstance(c.func, ast.Name)}
    return next((c for c in candidates if c in built), candidates[0] if candidates else None)


def _torch_model(src: _Source, params: list[Param]) -> tuple[str | None, str | None, list[str]]:
    """The nn.Module the script trains, its build rewritten over the config, and problems."""
    classes = {name for name, cls in src.classes.items() if src.subclasses(cls, "Module")}
    construction = None
    for call in src.calls:
        if _last(call.func) in WRAPPERS:
            construction = next((found for a in call.args
                                 for found in [_construction(src, a, src.scope(call), classes)] if found), None)
            if construction is not None:
                break
    if construction is None and len(classes) == 1:
        only = next(iter(classes))
        construction = next((c for c in src.calls if isinstance(c.func, ast.Name) and c.func.id == only), None)
        if construction is None:
            return only, None, [f"sweeps found no call that builds the model {only}: write build_model(config)"]
    if construction is None:
        return None, None, ["sweeps found no nn.Module subclass the script trains: write build_model(config)"]
    name = str(_last(construction.func))
    build = _build(construction, _args_names(src), {p.name for p in params})
    if build is None:
        return name, None, [f"the model {name}(...) is built from values sweeps cannot rebuild "
                            f"(line {_line(construction)}): write build_model(config)"]
    return name, build, []


# --- the saved file ------------------------------------------------------------------------------------------------
def _file_name(src: _Source, expr: ast.AST | None, scope: ast.AST, depth: int = 0) -> str | None:
    """The base name of the file a path expression names: "model.pt" of os.path.join(d, "model.pt")."""
    if expr is None or depth > DEPTH:
        return None
    text = _str(expr)
    if text is not None:
        return text.replace("\\", "/").rsplit("/", 1)[-1] or None
    if isinstance(expr, ast.JoinedStr):
        tail = _str(expr.values[-1]) if expr.values else None
        if tail is not None and ("/" in tail or len(expr.values) == 1):
            return tail.rsplit("/", 1)[-1] or None
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return _file_name(src, expr.right, scope, depth + 1)
    if isinstance(expr, ast.Call) and _last(expr.func) in ("join", "joinpath", "Path", "str", "fspath") and expr.args:
        return _file_name(src, expr.args[-1], scope, depth + 1)
    if isinstance(expr, ast.Name):
        return next((n for v in reversed(src.assigned(expr.id, scope))
                     for n in [_file_name(src, v, scope, depth + 1)] if n), None)
    return None


def _state_dict(src: _Source, expr: ast.AST | None, scope: ast.AST) -> bool:
    if isinstance(expr, ast.Name):
        return any(_state_dict(src, v, scope) for v in src.assigned(expr.id, scope) if not isinstance(v, ast.Name))
    return isinstance(expr, ast.Call) and _last(expr.func) == "state_dict"


def _saved_file(src: _Source) -> str | None:
    found: list[tuple[bool, str]] = []
    for call in src.calls:
        receiver = _text(call.func.value) if isinstance(call.func, ast.Attribute) else ""
        if src.qualname(call.func) == "torch.save" or (_last(call.func) == "save" and receiver.endswith("accelerator")):
            scope = src.scope(call)
            name = _file_name(src, _arg(call, 1, "f"), scope)
            if name:
                found.append((_state_dict(src, _arg(call, 0, "obj"), scope), name))
    return next((name for state, name in found if state), found[0][1] if found else None)


# --- the scan ------------------------------------------------------------------------------------------------------
def scan(source: str, filename: str = "<script>") -> ScriptScan:
    """Read ``source`` (a script's text). Never raises on a readable Python file; a SyntaxError propagates."""
    src = _Source(ast.parse(source, filename=filename))
    framework, framework_where = _framework(src)
    parser, params, problems, subcommand = _parser(src)
    metrics, metric_problems, reports_itself = _Metrics(src, framework).read()
    model_class = model_build = saved_file = None
    if framework == "lightning":
        model_class = _lightning_model(src)
    elif framework in ("torch", "accelerate"):
        model_class, model_build, model_problems = _torch_model(src, params)
        problems += model_problems
        saved_file = _saved_file(src)
    return ScriptScan(
        framework=framework, framework_where=framework_where, parser=parser, params=tuple(params), metrics=metrics,
        **_special(params), model_class=model_class, model_build=model_build, saved_file=saved_file,
        reports_itself=reports_itself, problems=tuple(dict.fromkeys(" ".join(p.split()) for p in
                                                                   [*problems, *metric_problems])),
        subcommand=subcommand)
