"""The framework a script uses, named by its imports: Lightning, transformers' Trainer, Accelerate or torch."""

from __future__ import annotations

import re

from sweeps.ops.scriptscan.nodes import _line, _modules, _Source, _where

LIGHTNING_ROOTS = frozenset({"lightning", "pytorch_lightning"})
HF_TRAINER = re.compile(r"^transformers(\.\w+)*\.\w*Trainer$")


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
