"""The model package promotion logs: the servable module exported with torch.export, its package.json, the
signature and input example of raw rows, and pinned requirements.

Serialization (docs/mlflow.md, "The model package"): an MLflow pyfunc model from code
(``served_model.py``) whose artifacts are a ``torch.export`` program (``model.pt2``) and ``package.json``. No
pickle anywhere: loading needs the listed requirements only (torch at the exact version it was exported with,
mlflow, numpy, pandas, plus what the trainable declares), never this project's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.errors import BadInput
from sweeps.registry.gate import EXAMPLE_ROWS, score

BASE_REQUIREMENTS = ("mlflow", "torch", "numpy", "pandas")
CODE = Path(__file__).with_name("served_model.py")  # the model's code: MLflow copies it into the package
BATCH = 1024  # the exported program's largest batch; the served model feeds it at most this many rows at once
TEXT_OUTPUTS = (("chars", "long"), ("scored", "long"), ("log_likelihood", "double"), ("perplexity", "double"),
                ("next_char", "string"), ("continuation", "string"))


def output_columns(task: str, labels: list[Any]) -> list[tuple[str, str]]:
    """(name, MLflow type) of the served model's output columns."""
    if task == "text":
        return list(TEXT_OUTPUTS)
    if task == "regression":
        return [("prediction", "double")]
    kind = "string" if labels and isinstance(labels[0], str) else "long"
    return [("label", kind), *((f"proba_{name}", "double") for name in labels)]


@dataclass(frozen=True)
class Servable:
    """What the trainable's loader gave, normalized: the module and the data that reads its inputs."""

    module: Any
    task: str
    columns: tuple[str, ...]
    labels: tuple[Any, ...]
    vocab: str
    context: int
    requirements: tuple[str, ...]

    def spec(self) -> dict[str, Any]:
        """``package.json``: everything the served model needs besides the program."""
        out: dict[str, Any] = {"format": 1, "task": self.task, "batch": BATCH}
        if self.task == "text":
            out.update(vocab=self.vocab, context=self.context, text_column="text")
        else:
            out.update(columns=list(self.columns), labels=list(self.labels))
        return out


def servable(obj: Any, x_val: Any, y_val: Any, key: str) -> Servable:
    """A loader's result (a ``ServableModel``-like object, or a bare ``nn.Module``) as a :class:`Servable`.

    A bare module takes the validation inputs as they are: a classifier when the targets are integers and it
    returns one logit per class, else a regressor; its columns are ``feature_0``, ``feature_1``...
    """
    import numpy as np
    import torch

    if hasattr(obj, "module") and hasattr(obj, "task"):
        return Servable(obj.module.eval(), str(obj.task), tuple(map(str, getattr(obj, "columns", ()) or ())),
                        tuple(getattr(obj, "labels", ()) or ()), str(getattr(obj, "vocab", "") or ""),
                        int(getattr(obj, "context", 0) or 0), tuple(getattr(obj, "requirements", ()) or ()))
    if not isinstance(obj, torch.nn.Module):
        raise BadInput(f"{key}: returned {type(obj).__name__}; a loader returns trainables.common.ServableModel "
                       f"or a torch.nn.Module")
    x, y = np.asarray(x_val), np.asarray(y_val)
    with torch.no_grad():
        out = obj.eval()(torch.as_tensor(x[:2], dtype=torch.float32))
    columns = tuple(f"feature_{i}" for i in range(x.shape[1]))
    if np.issubdtype(y.dtype, np.integer) and out.ndim == 2 and out.shape[1] > 1:
        return Servable(obj, "classification", columns, tuple(range(out.shape[1])), "", 0, ())
    return Servable(obj, "regression", columns, (), "", 0, ())


def check(s: Servable, key: str) -> None:
    """BadInput when the servable cannot be packaged (names ``key``, the loader)."""
    if s.task not in ("classification", "regression", "text"):
        raise BadInput(f"{key}: task {s.task!r}; use classification, regression or text")
    if s.task == "text" and (not s.vocab or s.context < 2):
        raise BadInput(f"{key}: a text model needs its vocab and a context of >= 2 tokens")
    if s.task != "text" and not s.columns:
        raise BadInput(f"{key}: a tabular model needs its input column names")
    if s.task == "classification" and not s.labels:
        raise BadInput(f"{key}: a classifier needs its class labels")


def example_input(s: Servable, x_val: Any) -> Any:
    """Raw rows for the export, the input example and the signature: a DataFrame of the package's columns, or of
    strings shorter and longer than the model's context."""
    import numpy as np
    import pandas as pd

    if s.task == "text":
        text = "".join(list(x_val)[:4])
        lengths = (len(text[:s.context // 2]), 1, min(len(text), 2 * s.context + 5))
        return pd.DataFrame({"text": [text[:n] for n in lengths]})
    x = np.asarray(x_val, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != len(s.columns):
        raise BadInput(f"validation_data: inputs of shape {x.shape}; the loader names {len(s.columns)} columns")
    return pd.DataFrame(x[:EXAMPLE_ROWS], columns=list(s.columns))


def export(s: Servable, example: Any, folder: Path, key: str) -> dict[str, str]:
    """Export the module with a dynamic batch, check it against eager outputs, and write the artifacts."""
    import numpy as np
    import torch

    if s.task == "text":
        x = torch.zeros((2, s.context), dtype=torch.long)
        x[1] = torch.arange(s.context) % len(s.vocab)
    else:
        x = torch.from_numpy(np.array(example[list(s.columns)], dtype=np.float32))
    batch = torch.export.Dim("batch", min=1, max=BATCH)
    try:
        with torch.no_grad():
            program = torch.export.export(s.module, (x,), dynamic_shapes=({0: batch},), strict=False)
            same = torch.allclose(program.module()(x), s.module(x), rtol=1e-4, atol=1e-5)
    except Exception as exc:
        raise BadInput(f"{key}: the model cannot be exported with torch.export ({type(exc).__name__}: "
                       f"{str(exc)[:300]}); promotion packages models as torch.export programs") from None
    if not same:
        raise BadInput(f"{key}: the exported program's outputs differ from the model's")
    folder.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(folder / "model.pt2"))
    (folder / "package.json").write_text(json.dumps(s.spec(), indent=1))
    return {"program": str(folder / "model.pt2"), "package": str(folder / "package.json")}


def signature(s: Servable, example: Any) -> Any:
    """Raw input columns in, the task's columns out (text models take ``max_new_chars`` as a parameter)."""
    from mlflow.models.signature import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    outputs = Schema([ColSpec(t, n) for n, t in output_columns(s.task, list(s.labels))])
    if s.task == "text":
        return ModelSignature(inputs=Schema([ColSpec("string", "text")]), outputs=outputs,
                              params=ParamSchema([ParamSpec("max_new_chars", "long", 0)]))
    return ModelSignature(inputs=Schema([ColSpec("double", c) for c in s.columns]), outputs=outputs)


def requirements(extra: tuple[str, ...]) -> list[str]:
    """``name==version`` of what loading needs, as installed here, without local labels (``2.13.0+cpu`` ->
    ``2.13.0``: a plain ``torch`` pin that a CPU-only index also satisfies)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    out = []
    for name in dict.fromkeys((*BASE_REQUIREMENTS, *extra)):
        try:
            out.append(f"{name}=={Version(version(name)).public}")
        except PackageNotFoundError:
            raise BadInput(f"trainable.load_model: requirement {name!r} is not installed here") from None
    return out


def save_local(s: Servable, x_val: Any, folder: Path, key: str) -> dict[str, Any]:
    """Everything ``log_model`` takes, with the artifacts written under ``folder``."""
    check(s, key)
    example = example_input(s, x_val)
    artifacts = export(s, example, folder / "artifacts", key)
    return {"python_model": str(CODE), "artifacts": artifacts, "signature": signature(s, example),
            "input_example": example, "pip_requirements": requirements(s.requirements)}


def frame(s: Servable, x_val: Any) -> Any:
    """The validation inputs as the served model takes them."""
    import numpy as np
    import pandas as pd

    if s.task == "text":
        return pd.DataFrame({"text": [str(t) for t in x_val]})
    return pd.DataFrame(np.asarray(x_val, dtype=np.float64), columns=list(s.columns))


def evaluate(s: Servable, model: Any, x_val: Any, y_val: Any) -> dict[str, float]:
    """The served model's scores on the raw validation data, in the task's terms."""
    return score(s.task, model.predict(frame(s, x_val)), y_val, s.labels)
