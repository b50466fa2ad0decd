"""The MLflow model every promotion logs (models-from-code): raw rows or strings in, answers in task terms out.

MLflow copies this file into the logged model (``code/``) and runs it when the model is loaded, so it imports
mlflow, numpy, pandas and torch only, never ``sweeps`` or ``trainables``. It reads two artifacts:

- ``program``: a ``torch.export`` program (``.pt2``) of the trainable's servable module, scalers included as
  buffers; loading it runs no pickled code and needs no model class, only the same torch version;
- ``package``: ``package.json``, what the program cannot hold: the task, input column names, class labels, the
  tokenizer's vocabulary and context length.

Outputs: classification -> ``label`` and one ``proba_<label>`` column per class; regression -> ``prediction``
in the target's original units; text -> per string ``chars``, ``scored`` (characters predicted from the ones
before), ``log_likelihood`` (natural log), ``perplexity``, ``next_char`` and ``continuation``
(``params={"max_new_chars": N}`` greedy characters, default none). Forward passes run on one torch thread
unless ``load_model(uri, model_config={"num_threads": N})`` says otherwise.
"""

from __future__ import annotations

import json
import math
from typing import Any

import mlflow
import numpy as np
import pandas as pd

BATCH = 1024  # rows (tabular) or windows (text) per forward pass when package.json does not say
UNKNOWN_CHAR = "\ufffd"


def _softmax(z: Any) -> Any:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(z: Any) -> Any:
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


class ServedModel(mlflow.pyfunc.PythonModel):  # type: ignore[misc, name-defined]
    """``predict(DataFrame)``: tabular models read the package's columns; text models the ``text`` column."""

    def load_context(self, context: Any) -> None:
        import torch

        with open(context.artifacts["package"], encoding="utf-8") as f:
            self.spec: dict[str, Any] = json.load(f)
        self.program = torch.export.load(context.artifacts["program"]).module()
        # small models run fastest on one thread (more only contend on a busy host); model_config overrides
        self.threads = int((getattr(context, "model_config", None) or {}).get("num_threads", 1))

    def _forward(self, x: Any) -> Any:
        """The program on a numpy batch, at most ``batch`` rows at a time, on ``threads`` threads; numpy out."""
        import torch

        outs, step, before = [], int(self.spec.get("batch", BATCH)), torch.get_num_threads()
        torch.set_num_threads(max(1, self.threads))
        try:
            with torch.no_grad():
                for i in range(0, len(x), step):
                    outs.append(self.program(torch.from_numpy(np.ascontiguousarray(x[i:i + step]))).numpy())
        finally:
            torch.set_num_threads(before)
        return np.concatenate(outs)

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> Any:
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        if self.spec["task"] == "text":
            return self._text(frame, int((params or {}).get("max_new_chars", 0) or 0))
        return self._tabular(frame)

    # -- tabular ------------------------------------------------------------------------------------------
    def _tabular(self, frame: pd.DataFrame) -> pd.DataFrame:
        cols, labels = self.spec["columns"], self.spec.get("labels") or []
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"input: missing column(s) {', '.join(missing[:5])}; the model takes {len(cols)} "
                             f"columns: {', '.join(cols[:5])}...")
        x = frame[cols].to_numpy(dtype=np.float32)  # (N, F) raw features
        if self.spec["task"] == "regression":
            out = self._forward(x).reshape(len(x)) if len(x) else np.zeros(0)
            return pd.DataFrame({"prediction": out.astype(np.float64)})
        probs = _softmax(self._forward(x)) if len(x) else np.zeros((0, len(labels)))  # (N, C)
        result = pd.DataFrame({"label": pd.Series([labels[i] for i in probs.argmax(axis=1)],
                                                  dtype=object if isinstance(labels[0], str) else np.int64)})
        for j, name in enumerate(labels):
            result[f"proba_{name}"] = probs[:, j].astype(np.float64)
        return result

    # -- text ---------------------------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        vocab = self.spec["vocab"]
        stoi = {c: i for i, c in enumerate(vocab)}
        return [stoi.get(c, len(vocab)) for c in text]

    def _logprobs(self, windows: list[list[int]]) -> Any:
        """Log-probabilities (W, context, V) for windows of at most ``context`` ids, right-padded: the model
        is causal, so padding after a position never changes what it predicts there."""
        ctx = int(self.spec["context"])
        x = np.zeros((len(windows), ctx), dtype=np.int64)
        for i, w in enumerate(windows):
            x[i, :len(w)] = w
        return _log_softmax(self._forward(x).astype(np.float64)) if windows else np.zeros((0, ctx, 1))

    def _score(self, rows: list[list[int]]) -> tuple[list[float], list[int]]:
        """Sum of log p(char t | chars < t) over t >= 1, per row: windows of ``context`` ids, stride
        ``context - 1``, so every character after the first is predicted once, from up to context - 1 before."""
        ctx = int(self.spec["context"])
        owner, windows = [], []
        for r, ids in enumerate(rows):
            for start in range(0, max(len(ids) - 1, 0), ctx - 1):
                owner.append(r)
                windows.append(ids[start:start + ctx])
        ll, n = [0.0] * len(rows), [0] * len(rows)
        lp = self._logprobs(windows)
        for k, (r, w) in enumerate(zip(owner, windows, strict=True)):
            ll[r] += float(lp[k, np.arange(len(w) - 1), w[1:]].sum())
            n[r] += len(w) - 1
        return ll, n

    def _next(self, rows: list[list[int]]) -> list[int | None]:
        """The most likely next id after each row (None for an empty row)."""
        ctx = int(self.spec["context"])
        live = [r for r, ids in enumerate(rows) if ids]
        lp = self._logprobs([rows[r][-ctx:] for r in live])
        out: list[int | None] = [None] * len(rows)
        for k, r in enumerate(live):
            out[r] = int(lp[k, min(len(rows[r]), ctx) - 1].argmax())
        return out

    def _text(self, frame: pd.DataFrame, max_new_chars: int) -> pd.DataFrame:
        column = self.spec.get("text_column", "text")
        if column not in frame.columns and frame.shape[1] != 1:
            raise ValueError(f"input: a text model reads one string column {column!r}; got {list(frame.columns)}")
        texts = [str(t) for t in (frame[column] if column in frame.columns else frame.iloc[:, 0])]
        vocab = self.spec["vocab"]
        rows = [self._ids(t) for t in texts]
        ll, n = self._score(rows)
        nxt = self._next(rows)
        generated = [list(ids) for ids in rows]
        for _ in range(max(0, min(max_new_chars, 1000))):
            for ids, i in zip(generated, self._next(generated), strict=True):
                if i is not None:
                    ids.append(i)
        def char(i: int | None) -> str:
            return "" if i is None else vocab[i] if i < len(vocab) else UNKNOWN_CHAR
        return pd.DataFrame({
            "chars": np.array([len(t) for t in texts], dtype=np.int64),
            "scored": np.array(n, dtype=np.int64),
            "log_likelihood": np.array(ll, dtype=np.float64),
            "perplexity": np.array([math.exp(-a / b) if b else math.nan for a, b in zip(ll, n, strict=True)]),
            "next_char": [char(i) for i in nxt],
            "continuation": ["".join(char(i) for i in g[len(r):]) for g, r in zip(generated, rows, strict=True)],
        })


mlflow.models.set_model(ServedModel())
