"""A user's training script, read without running it: its framework, parser, metrics, epochs and model.

``sweeps new trainable NAME --script PATH`` (and ``--from pkg.module:main``) reads the script's source with
:mod:`ast` (never importing it) and says, for every value it writes into the scaffold, where it came from. Pure:
text in, a :class:`ScriptScan` out; nothing here imports the frameworks.

INTERFACE (fixed; the scaffold and the run-time adapter rely on it): see the dataclasses and :func:`scan`.

One module per job: :mod:`.nodes` indexes the tree, :mod:`.framework` names the framework, :mod:`.parser`
picks the command-line parser (:mod:`.argparse_reader`, :mod:`.hf_reader`, :mod:`.lightning_cli`, with
:mod:`.annotations`), :mod:`.roles` finds the special options, :mod:`.metrics` the logged names and
:mod:`.trained_model` the model and its saved file; :mod:`.result` holds the dataclasses.
"""

from __future__ import annotations

import ast

from sweeps.ops.scriptscan.framework import HF_TRAINER, LIGHTNING_ROOTS, _framework
from sweeps.ops.scriptscan.hf_reader import TRAINING_ARGUMENTS
from sweeps.ops.scriptscan.metrics import EVALUATE_SAME_KEY, _Metrics
from sweeps.ops.scriptscan.nodes import DEPTH, _Source
from sweeps.ops.scriptscan.parser import NO_PARSER, _parser
from sweeps.ops.scriptscan.result import FRAMEWORKS, PARSERS, Metric, Param, ScriptScan
from sweeps.ops.scriptscan.roles import (
    EPOCH_NAMES,
    LR_NAMES,
    OUTPUT_NAMES,
    RESUME_RULES,
    SWITCHES,
    VALUE_KINDS,
    _special,
)
from sweeps.ops.scriptscan.trained_model import MOVES, WRAPPERS, _lightning_model, _saved_file, _torch_model

__all__ = [
    "DEPTH", "EPOCH_NAMES", "EVALUATE_SAME_KEY", "FRAMEWORKS", "HF_TRAINER", "LIGHTNING_ROOTS", "LR_NAMES", "MOVES",
    "NO_PARSER", "OUTPUT_NAMES", "PARSERS", "RESUME_RULES", "SWITCHES", "TRAINING_ARGUMENTS", "VALUE_KINDS",
    "WRAPPERS", "Metric", "Param", "ScriptScan", "scan",
]


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
