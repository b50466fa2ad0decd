"""The metric names a script logs (self.log, compute_metrics, mlflow, accelerator.log, add_scalar, sweeps.report)."""

from __future__ import annotations

import ast

from sweeps.ops.scriptscan.framework import HF_TRAINER
from sweeps.ops.scriptscan.nodes import DEPTH, _arg, _Function, _kw, _last, _line, _position, _Source, _str, _text
from sweeps.ops.scriptscan.result import Metric

# evaluate.load(NAME).compute(...) returns {NAME: value} for these
EVALUATE_SAME_KEY = frozenset({"accuracy", "f1", "precision", "recall", "mse", "mae", "matthews_correlation",
                               "pearsonr", "spearmanr", "exact_match"})


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
