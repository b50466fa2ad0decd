"""The registered model's package and the registry lock, in process (issue 21).

Packages: tiny torch modules behind ``trainables.common.ServableModel`` are packaged by
``sweeps.registry.package`` (torch.export program + package.json + signature), saved with
``mlflow.pyfunc.save_model`` and loaded back with ``mlflow.pyfunc.load_model``: raw rows in, labels,
probabilities, original-unit targets and text scores out. The lock: a real SQLite MLflow store, two holders.
The slow tier (tests/test_registry_serve_slow.py) does the same from a fresh virtualenv and over HTTP.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import _template_store, dead_holder

from sweeps import lease
from sweeps.errors import BadInput, GateRefused
from sweeps.registry import lock, package
from trainables import common


def _saved(tmp: Path, obj: Any, x: Any, y: Any) -> tuple[package.Servable, Any, dict[str, Any]]:
    import mlflow.pyfunc

    s = package.servable(obj, x, y, "trainable.load_model")
    kwargs = package.save_local(s, x, tmp, "trainable.load_model")
    mlflow.pyfunc.save_model(path=str(tmp / "model"), **kwargs)
    return s, mlflow.pyfunc.load_model(str(tmp / "model")), kwargs


def _linear(n_in: int, n_out: int, seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out)


def test_a_classifier_takes_raw_rows_and_answers_with_labels_and_probabilities(tmp_path: Path) -> None:
    import pandas as pd
    import torch

    rng = np.random.default_rng(0)
    x = rng.normal(50.0, 10.0, size=(20, 3))  # raw units, far from standardized
    net = _linear(3, 2)
    module = common.standardized(net, x.mean(axis=0), x.std(axis=0))
    obj = common.ServableModel(module=module, task="classification", columns=("a", "b", "c"),
                               labels=("no", "yes"))
    s, served, kwargs = _saved(tmp_path, obj, x, np.zeros(20, dtype=np.int64))
    pred = served.predict(pd.DataFrame(x, columns=["a", "b", "c"]))
    with torch.no_grad():
        expect = torch.softmax(net(torch.as_tensor((x - x.mean(0)) / x.std(0), dtype=torch.float32)), 1).numpy()
    assert list(pred.columns) == ["label", "proba_no", "proba_yes"]
    assert np.allclose(pred[["proba_no", "proba_yes"]].to_numpy(), expect, atol=1e-5)
    assert list(pred["label"]) == [("no", "yes")[i] for i in expect.argmax(1)]
    # the signature names the raw columns; the example is raw rows; requirements are pinned, no local label
    sig = served.metadata.signature
    assert sig.inputs.input_names() == ["a", "b", "c"] and sig.outputs.input_names()[0] == "label"
    assert np.allclose(kwargs["input_example"].to_numpy(), x[:5])
    assert "torch==2.13.0" in kwargs["pip_requirements"] and not any("+" in r for r in kwargs["pip_requirements"])
    # columns are read by name, in any order; a missing one is named
    assert np.allclose(served.predict(pd.DataFrame(x, columns=["a", "b", "c"])[["c", "a", "b"]])["proba_no"],
                       expect[:, 0], atol=1e-5)
    with pytest.raises(Exception, match="b"):
        served.predict(pd.DataFrame(x[:, :1], columns=["a"]))
    assert package.evaluate(s, served, x, expect.argmax(1)) == {"accuracy": 1.0}


def test_a_regressor_answers_in_the_targets_original_units(tmp_path: Path) -> None:
    import torch

    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 4))
    net = torch.nn.Sequential(_linear(4, 1), torch.nn.Flatten(0))
    module = common.standardized(net, np.zeros(4), np.ones(4), y_mean=150.0, y_std=70.0)
    s, served, _ = _saved(tmp_path, common.ServableModel(module=module, task="regression",
                                                         columns=("f0", "f1", "f2", "f3")), x, None)
    pred = served.predict(package.frame(s, x))["prediction"].to_numpy()
    with torch.no_grad():
        standardized = net(torch.as_tensor(x, dtype=torch.float32)).numpy()
    assert np.allclose(pred, standardized * 70.0 + 150.0, atol=1e-4)
    assert package.evaluate(s, served, x, pred)["rmse"] == pytest.approx(0.0, abs=1e-9)


def _text_module(vocab_size: int, favourite: int) -> Any:
    """A 'language model' that ignores its input: the same logits everywhere, peaked at ``favourite``."""
    import torch

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            logits = torch.zeros(vocab_size)
            logits[favourite] = 2.0
            self.register_buffer("logits", logits)

        def forward(self, ids: Any) -> Any:
            return self.logits.expand(ids.shape[0], ids.shape[1], vocab_size) + 0 * ids.unsqueeze(-1)

    return Flat()


def test_a_text_model_scores_strings_of_any_length(tmp_path: Path) -> None:
    import pandas as pd

    vocab = "abc"
    obj = common.ServableModel(module=_text_module(len(vocab) + 1, favourite=1), task="text", vocab=vocab,
                               context=4)
    texts = ["", "a", "ab", "abcabc", "abcabcabcabca", "zz"]  # 0 .. 13 characters; z is out of the vocabulary
    _, served, kwargs = _saved(tmp_path, obj, texts, None)
    pred = served.predict(pd.DataFrame({"text": texts}))
    p = np.exp(2.0) / (np.exp(2.0) + 3)  # p(b); every other id has q
    q = 1 / (np.exp(2.0) + 3)
    assert list(pred["chars"]) == [len(t) for t in texts]
    assert list(pred["scored"]) == [max(len(t) - 1, 0) for t in texts], "every character after the first, once"
    for t, ll in zip(texts, pred["log_likelihood"], strict=True):
        assert ll == pytest.approx(sum(math.log(p if c == "b" else q) for c in t[1:]))
    assert math.isnan(pred["perplexity"][0]) and math.isnan(pred["perplexity"][1])
    assert list(pred["next_char"]) == ["", "b", "b", "b", "b", "b"]
    assert list(pred["continuation"]) == [""] * len(texts)
    grown = served.predict(pd.DataFrame({"text": ["ab", ""]}), params={"max_new_chars": 3})
    assert list(grown["continuation"]) == ["bbb", ""]
    assert served.metadata.signature.inputs.input_names() == ["text"]
    lengths = [len(t) for t in kwargs["input_example"]["text"]]
    assert min(lengths) < 4 < max(lengths), "the input example has strings shorter and longer than the context"


def test_a_bare_module_is_packaged_from_the_validation_data_it_takes(tmp_path: Path) -> None:
    x = np.random.default_rng(2).normal(size=(8, 5)).astype(np.float32)
    s, served, _ = _saved(tmp_path, _linear(5, 3), x, np.array([0, 1, 2, 0, 1, 2, 0, 1]))
    assert (s.task, s.columns[0], s.labels) == ("classification", "feature_0", (0, 1, 2))
    assert set(served.predict(package.frame(s, x))["label"]) <= {0, 1, 2}


def test_a_model_torch_export_cannot_trace_is_refused_naming_the_loader(tmp_path: Path) -> None:
    import torch

    class DataDependent(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x[:, :2] if float(x.sum()) > 0 else x[:, :3]  # the output shape depends on the values

    obj = common.ServableModel(module=DataDependent(), task="classification", columns=("a", "b", "c"),
                               labels=(0, 1))
    with pytest.raises(BadInput, match="trainable.load_model: the model cannot be exported"):
        _saved(tmp_path, obj, np.ones((4, 3)), np.zeros(4, dtype=np.int64))


def test_servable_model_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="task"):
        common.ServableModel(module=None, task="ranking", columns=("a",))
    with pytest.raises(ValueError, match="vocab"):
        common.ServableModel(module=None, task="text")
    with pytest.raises(ValueError, match="column"):
        common.ServableModel(module=None, task="regression")


# -- the lock, on a real SQLite store ------------------------------------------------------------------------
@pytest.fixture
def client(tmp_path: Path) -> Any:
    from mlflow.tracking import MlflowClient

    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_the_lock_admits_one_holder_and_names_it_to_the_next(client: Any) -> None:
    first = lock.acquire(client, "m", "champion", wait_s=5)
    tags = client.get_registered_model("m@champion.promote-lock").tags
    assert tags[lock.TAG_HOLDER] == lease.driver_id()
    assert tags[lock.TAG_TOKEN] == first.token
    # a second promoter in another process waits, then gives up naming the holder
    code = ("import sys; from mlflow.tracking import MlflowClient; from sweeps.registry import lock; "
            "c = MlflowClient(sys.argv[1], sys.argv[1]); lock.acquire(c, 'm', 'champion', wait_s=1.5)")
    uri = client._registry_uri
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "is being promoted by" in proc.stderr and str(os.getpid()) in proc.stderr
    assert time.monotonic() - t0 >= 1.5
    first.check()
    lock.release(first)
    with pytest.raises(GateRefused, match="expired or was taken over"):
        first.check()
    again = lock.acquire(client, "m", "champion", wait_s=1)  # free again
    lock.release(again)
    assert not [m for m in client.search_registered_models() if lock.is_lock(m.name)]


def test_a_lock_whose_holder_died_in_this_pid_namespace_is_taken_over_at_once(client: Any) -> None:
    dead = dead_holder()
    client.create_registered_model("m@champion.promote-lock", tags={
        lock.TAG_HOLDER: dead.text(), lock.TAG_TOKEN: "stale", lock.TAG_EXPIRES: f"{time.time() + 600:.3f}"})
    held = lock.acquire(client, "m", "champion", wait_s=5)
    assert held.token != "stale"
    held.check()
    lock.release(held)
    names = [m.name for m in client.search_registered_models()]
    assert not [n for n in names if "promote-lock" in n], names  # the takeover marker is gone too


def test_a_host_pid_holder_without_proof_waits_for_its_expiry(client: Any) -> None:
    """A bare ``host:pid`` (older versions), or a pid of another namespace, proves nothing: the lease decides."""
    dead = dead_holder()
    other_ns = lease.Holder(dead.host, dead.pid, "t" * 32, "other-boot/1/1")
    for holder in (dead.label(), other_ns.text(), f"{lease.host()}:{os.getpid()}"):
        client.create_registered_model("m@champion.promote-lock", tags={
            lock.TAG_HOLDER: holder, lock.TAG_TOKEN: "live", lock.TAG_EXPIRES: f"{time.time() + 60:.3f}"})
        with pytest.raises(GateRefused, match="is being promoted by"):
            lock.acquire(client, "m", "champion", wait_s=0.3)
        client.delete_registered_model("m@champion.promote-lock")


def test_release_and_check_go_by_the_token_and_leave_a_lock_about_to_expire(client: Any) -> None:
    held = lock.acquire(client, "m", "champion", wait_s=5)
    name = "m@champion.promote-lock"
    client.set_registered_model_tag(name, lock.TAG_TOKEN, "successor")  # taken over: same host, same pid
    with pytest.raises(GateRefused, match="expired or was taken over"):
        held.check()
    lock.release(held)
    assert client.get_registered_model(name).tags[lock.TAG_TOKEN] == "successor"  # not ours: not deleted
    client.set_registered_model_tag(name, lock.TAG_TOKEN, held.token)
    client.set_registered_model_tag(name, lock.TAG_EXPIRES, f"{time.time() + lock.margin_s() / 2:.3f}")
    with pytest.raises(GateRefused, match="expired or was taken over"):
        held.check()  # too little time left to move the alias safely
    lock.release(held)
    assert client.get_registered_model(name)  # left to expire: a delete now could hit a successor's lock


def test_an_expired_lock_from_another_host_is_taken_over(client: Any) -> None:
    client.create_registered_model("m@champion.promote-lock", tags={
        lock.TAG_HOLDER: "elsewhere:1", lock.TAG_TOKEN: "old", lock.TAG_EXPIRES: f"{time.time() - 1:.3f}"})
    lock.release(lock.acquire(client, "m", "champion", wait_s=5))
    with pytest.raises(GateRefused, match="elsewhere:1"):
        client.create_registered_model("m@champion.promote-lock", tags={
            lock.TAG_HOLDER: "elsewhere:1", lock.TAG_TOKEN: "live", lock.TAG_EXPIRES: f"{time.time() + 60:.3f}"})
        lock.acquire(client, "m", "champion", wait_s=0.5)  # a live lease elsewhere is respected


def test_the_served_model_code_imports_nothing_the_serving_environment_lacks() -> None:
    """MLflow copies served_model.py into every package and runs it where only the requirements are installed."""
    import ast

    tree = ast.parse(package.CODE.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "math", "typing", "mlflow", "numpy", "pandas", "torch"}, names
    assert set(package.BASE_REQUIREMENTS) >= names & {"mlflow", "numpy", "pandas", "torch"}
