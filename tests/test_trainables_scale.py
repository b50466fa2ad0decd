"""Trainables at scale: the shared knobs (LR scaling, gradient accumulation), the Ray Data trainable
(``trainables.tabular_data``) and the Hugging Face Transformers trainable (``trainables.charlm``).

Fast tier: the knob logic, the character tokenizer, the corpus, the LR schedule, the dataset writer and the
deterministic split. Slow tier: a real 2-trial, 2-worker sweep of each trainable through ``python -m sweeps``,
read back from Tune's files and MLflow, and the Transformers sweep promoted and scored through the registry.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SweepsEnv, mlflow_client, model_files
from freshvenv import FreshVenv, invocations, requirements_file
from harness import Sweep

from trainables import charlm, common, tabular_data


# -- the knobs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("config", "world", "expected"), [
    ({"lr": 0.01}, 4, 0.01),                       # off by default
    ({"lr": 0.01, "scale_lr": False}, 4, 0.01),
    ({"lr": 0.01, "scale_lr": True}, 4, 0.04),     # linear rule
    ({"lr": 0.01, "scale_lr": True}, 1, 0.01),
    ({"lr": 3, "scale_lr": True}, 2, 6.0),
])
def test_effective_lr_scales_linearly_only_when_asked(config: dict, world: int, expected: float) -> None:
    assert common.effective_lr(config, world) == pytest.approx(expected)


@pytest.mark.parametrize(("config", "expected"), [({}, 1), ({"grad_accum_steps": 1}, 1),
                                                  ({"grad_accum_steps": 4}, 4)])
def test_accumulation_steps_values(config: dict, expected: int) -> None:
    assert common.accumulation_steps(config) == expected


@pytest.mark.parametrize("bad", [0, -2])
def test_accumulation_steps_refuses_values_below_one(bad: int) -> None:
    with pytest.raises(ValueError, match="grad_accum_steps must be >= 1"):
        common.accumulation_steps({"grad_accum_steps": bad})


def test_knob_errors_accepts_the_defaults_and_good_values() -> None:
    assert common.knob_errors({}) == []
    assert common.knob_errors({"lr": 0.01, "scale_lr": True, "grad_accum_steps": 8, "torch_threads": 2}) == []
    common.check_knobs({"lr": 1e-3, "scale_lr": False, "grad_accum_steps": 1})


@pytest.mark.parametrize(("key", "bad"), [
    ("scale_lr", "false"),          # a string would be truthy: the opt-in must be a real boolean
    ("scale_lr", 1),
    ("grad_accum_steps", 0),
    ("grad_accum_steps", -1),
    ("grad_accum_steps", 2.5),      # int() would silently truncate it
    ("grad_accum_steps", True),
    ("grad_accum_steps", "4"),
    ("lr", 0),
    ("lr", -0.1),
    ("lr", float("nan")),
    ("lr", "0.01"),
    ("torch_threads", -1),
    ("torch_threads", 1.5),
])
def test_knob_errors_name_the_bad_key_and_value(key: str, bad: object) -> None:
    errors = common.knob_errors({"lr": 0.01, key: bad})
    assert len(errors) == 1 and errors[0].startswith(f"{key}:") and repr(bad) in errors[0], errors
    with pytest.raises(ValueError, match=key):
        common.check_knobs({"lr": 0.01, key: bad})


@pytest.mark.parametrize("params", [
    {}, {"lr": 0.01, "scale_lr": True, "grad_accum_steps": 8, "torch_threads": 2}, {"torch_threads": 0},
    {"scale_lr": "false"}, {"scale_lr": 1}, {"grad_accum_steps": 0}, {"grad_accum_steps": 2.5},
    {"grad_accum_steps": True}, {"grad_accum_steps": "4"}, {"lr": 0}, {"lr": -0.1}, {"lr": float("nan")},
    {"lr": "0.01"}, {"lr": True}, {"torch_threads": -1}, {"torch_threads": 1.5},
    {"lr": -1, "scale_lr": "yes", "grad_accum_steps": 0, "torch_threads": -2},
], ids=repr)
def test_the_validator_checks_the_knobs_as_the_trainables_do(params: dict[str, Any]) -> None:
    """sweeps.config does not import the bundled examples: its copy of the knob rules must agree with theirs."""
    from sweeps.config.sections.trainable import knob_errors

    assert knob_errors(params) == common.knob_errors(params)


def test_knob_errors_reports_every_problem_at_once() -> None:
    errors = common.knob_errors({"lr": -1, "scale_lr": "yes", "grad_accum_steps": 0})
    assert [e.split(":")[0] for e in errors] == ["lr", "scale_lr", "grad_accum_steps"]


# -- where the workers train ---------------------------------------------------------------------------------
FACTS_PROBE = """
import json, sys
import torch, torch.distributed as dist
from trainables import common
rank, port = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
print(json.dumps(common.worker_facts(torch.nn.Linear(4, 2), rank, local_rank=rank)))
dist.destroy_process_group()
"""


def test_worker_facts_gather_every_ranks_device_and_the_backend() -> None:
    """The CPU counterpart of tests/test_gpu.py's check: two real gloo ranks, each learns every rank's device."""
    import socket
    import subprocess
    import sys

    import torch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", FACTS_PROBE, str(rank), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=100) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    every = [{"rank": rank, "local_rank": rank, "device": "cpu"} for rank in (0, 1)]
    for out, _ in outs:
        facts = json.loads(out.strip().splitlines()[-1])
        assert facts["sys/backend"] == "gloo" and json.loads(facts["sys/workers"]) == every, facts
    alone = common.worker_facts(torch.nn.Linear(4, 2), 0, 0)  # no process group in this process
    assert alone["sys/backend"] == "none" and json.loads(alone["sys/workers"]) == every[:1]
    assert alone["sys/placement"] == facts["sys/placement"] == "none", "outside Ray: no placement group"


# -- charlm: tokenizer, corpus, schedule --------------------------------------------------------------------
def test_char_tokenizer_round_trips_text() -> None:
    tok = charlm.CharTokenizer()
    text = "Beautiful is better than ugly.\n\tExplicit is better than implicit. {x: 1} ~!@#$%^&*()"
    ids = tok.encode(text)
    assert len(ids) == len(text) and tok.decode(ids) == text
    assert tok.vocab_size == len(charlm.VOCAB) + 1 == 98
    assert tok.encode(charlm.VOCAB) == list(range(len(charlm.VOCAB)))


def test_char_tokenizer_maps_unknown_characters_to_one_id() -> None:
    tok = charlm.CharTokenizer()
    ids = tok.encode("café→")
    assert ids[:3] == tok.encode("caf") and ids[3] == ids[4] == tok.unk_id
    assert tok.decode(ids) == "caf" + charlm.UNKNOWN_CHAR * 2
    assert tok.decode([tok.unk_id, 10_000, -1]) == charlm.UNKNOWN_CHAR * 3
    with pytest.raises(ValueError, match="repeated"):
        charlm.CharTokenizer("abca")


def test_corpus_is_deterministic_local_text() -> None:
    train = charlm.corpus("train", 5000)
    assert len(train) == 5000 and train == charlm.corpus.__wrapped__("train", 5000)
    val = charlm.corpus("val", 3000)
    assert val.startswith("The Zen of Python, by Tim Peters") and "Beautiful is better than ugly." in val
    assert val[:200] not in charlm.corpus("train", 60000), "the held-out text is not in the training text"
    with pytest.raises(ValueError, match="split"):
        charlm.corpus("test", 10)


def test_blocks_and_validation_data_are_raw_held_out_text() -> None:
    rows = charlm.blocks("abcdefghij" * 10, 16)
    assert tuple(rows.shape) == (6, 16)  # 100 chars // 16, tail dropped
    texts, targets = charlm.validation_data({"block_size": 32, "val_chars": 1000})
    assert targets is None and len(texts) == 31 and {len(t) for t in texts} == {32}
    assert "".join(texts) == charlm.corpus("val", 1000)[:31 * 32], "promotion scores the held-out text itself"
    assert charlm.preprocessing({"block_size": 32}) == {"vocab": charlm.VOCAB, "context": 32}
    with pytest.raises(ValueError, match="less than one block"):
        charlm.blocks("short", 64)


def test_lr_schedule_warms_up_then_decays_to_zero() -> None:
    f = [charlm.lr_factor(s, warmup=4, total=20) for s in range(21)]
    assert f[:5] == sorted(f[:5]) and f[0] > 0 and f[4] == 1.0
    assert f[4:] == sorted(f[4:], reverse=True) and f[20] == 0.0
    assert charlm._offset_factor(0, offset=10, warmup=4, total=20) == f[10], "a resumed run re-enters the curve"
    assert charlm.warmup_steps({"warmup_ratio": 0.1}, 95) == 10
    assert charlm.warmup_steps({"warmup_ratio": 0.1, "warmup_steps": 3}, 95) == 3
    with pytest.raises(ValueError, match="warmup_ratio"):
        charlm.warmup_steps({"warmup_ratio": 1.5}, 10)


# -- tabular_data: the dataset writer and the split ---------------------------------------------------------
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_example_dataset_writer_round_trips(tmp_path: Path, fmt: str) -> None:
    import pyarrow.dataset as pds

    path = tabular_data.write_example_dataset(tmp_path / "sub" / f"wine.{fmt}", "wine", fmt)
    table = pds.dataset(path, format=fmt).to_table()
    assert table.num_rows == 178 and {"target", "row_id", "alcohol", "proline"} <= set(table.column_names)
    assert sorted(table.column("row_id").to_pylist()) == list(range(178))
    assert sorted(set(table.column("target").to_pylist())) == [0, 1, 2]
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temp file is left behind"


def test_ensure_data_generates_a_missing_local_file_once(tmp_path: Path) -> None:
    settings = tabular_data.data_settings({"data": {"path": str(tmp_path / "d" / "w.parquet")}})
    assert tabular_data.ensure_data(settings) == settings.path and Path(settings.path).is_file()
    mtime = Path(settings.path).stat().st_mtime_ns
    tabular_data.ensure_data(settings)
    assert Path(settings.path).stat().st_mtime_ns == mtime, "an existing file is never rewritten"
    no_example = tabular_data.data_settings({"data": {"path": str(tmp_path / "missing.parquet"), "example": None}})
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        tabular_data.ensure_data(no_example)


def test_default_data_path_is_under_sweeps_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "h"))
    assert tabular_data.data_settings({}).path == str(tmp_path / "h" / "data" / "wine.parquet")
    monkeypatch.setenv("SWEEPS_HOME", "rel")
    monkeypatch.setenv("TUNE_ORIG_WORKING_DIR", str(tmp_path))
    assert tabular_data.default_data_path() == str(tmp_path / "rel" / "data" / "wine.parquet")


@pytest.mark.parametrize(("data", "key"), [
    ({"format": "json"}, "data.format"), ({"val_fraction": 0}, "data.val_fraction"),
    ({"val_fraction": 1.0}, "data.val_fraction"), ({"num_classes": 1}, "data.num_classes"),
    ({"example": "iris"}, "data.example"), ({"pth": "x"}, "unknown key"), ({"reader": "v2"}, "data.reader"),
])
def test_data_settings_refuse_bad_values(data: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        tabular_data.data_settings({"data": data})


def test_split_is_deterministic_and_order_free() -> None:
    ids = np.arange(10_000)
    mask = tabular_data.is_val(ids, 0.2)
    assert 0.18 < mask.mean() < 0.22
    shuffled = np.random.default_rng(0).permutation(ids)
    assert (tabular_data.is_val(shuffled, 0.2) == mask[shuffled]).all(), "a row's split depends on its id only"
    assert tabular_data.is_val(ids, 0.2)[tabular_data.is_val(ids, 0.1)].all(), \
        "a smaller val fraction selects a subset of the larger one"


def test_shard_evidence_detects_overlap_and_leaks() -> None:
    val_id = int(np.flatnonzero(tabular_data.is_val(np.arange(100), 0.2))[0])
    train_ids = [i for i in range(100) if not tabular_data.is_val(np.array([i]), 0.2)[0]]
    good = tabular_data.shard_evidence([train_ids[:10], train_ids[10:20]], 0.2)
    assert good["data/shards_disjoint"] == 1.0 and good["data/rows_total"] == good["data/rows_unique"] == 20
    assert good["data/rows_seen"] == 10 and good["data/rank0_id_sum"] == sum(train_ids[:10])
    assert good["data/val_rows_in_train"] == 0
    bad = tabular_data.shard_evidence([train_ids[:10], train_ids[5:15] + [val_id]], 0.2)
    assert bad["data/shards_disjoint"] == 0.0 and bad["data/val_rows_in_train"] == 1


def test_tabular_model_and_validation_data_read_the_same_file(tmp_path: Path) -> None:
    config = {"data": {"path": str(tmp_path / "wine.parquet")}, "hidden_size": 16}
    x, y = tabular_data.validation_data(config)
    ids = np.arange(178)
    assert tuple(x.shape) == (int(tabular_data.is_val(ids, 0.2).sum()), 13) and len(y) == len(x)
    model = tabular_data.build_model(config).eval()
    assert tuple(model(x).shape) == (len(x), 3)
    assert {"norm.running_mean", "norm.running_var"} <= set(model.state_dict()), "norm stats are checkpointed"


# -- slow tier: real sweeps ---------------------------------------------------------------------------------
FAST = ["cluster.health_check_interval_s=0.1", "cluster.worker_start_timeout_s=120", "report.enabled=false"]


def _record(env: SweepsEnv) -> dict:
    return Sweep.only(env).record()


def _trials(rec: dict):  # noqa: ANN202
    from sweeps.reports.results import epochs_of, load_records

    return load_records(rec["experiment_dirs"], rec["metric"], rec["mode"], epochs_of(rec["config"]))


def _child_runs(env: SweepsEnv, rec: dict) -> list:
    c = mlflow_client(env.tracking_uri)
    return c.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")


def _assert_tracked(env: SweepsEnv, rec: dict, n: int, epochs: int) -> None:
    """n finished child runs with a per-epoch val/loss history and the best checkpoint as artifacts."""
    c = mlflow_client(env.tracking_uri)
    children = _child_runs(env, rec)
    assert len(children) == n and {r.info.status for r in children} == {"FINISHED"}
    for r in children:
        hist = sorted(c.get_metric_history(r.info.run_id, "val/loss"), key=lambda m: m.step)
        assert [m.step for m in hist] == list(range(1, epochs + 1)) and all(math.isfinite(m.value) for m in hist)
        assert {"model.pt", "optimizer.pt", "meta.json"} <= model_files(c, r)


@pytest.fixture(scope="module")
def wine_sweep(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The two Ray Data tests share it. Why its own sweep: the Ray Data trainable (a Parquet file sharded over 2
    workers) is the subject; no other sweep runs it."""
    env = SweepsEnv(tmp_path_factory.mktemp("wine"))
    env.run("run", "+experiment=wine_data", "sweep.num_samples=1", "scheduler=fifo",
            "search_space.lr={dist: grid, values: [0.01, 0.03]}", "trainable.num_workers=2",
            "trainable.params.epochs=2", "trainable.params.scale_lr=true", "trainable.params.grad_accum_steps=2",
            *FAST, check=True, timeout=1500)
    yield env, _record(env)
    env.cleanup()


@pytest.mark.slow
def test_ray_data_sweep_shards_disjointly_and_reaches_tune_and_mlflow(wine_sweep) -> None:  # noqa: ANN001
    """Shares the module's Ray Data sweep (fixture ``wine_sweep``): disjoint shards per worker, every epoch in Tune and
    MLflow."""
    import pyarrow.parquet as pq

    env, rec = wine_sweep
    data = env.home / "data" / "wine.parquet"
    assert data.is_file(), "build_datasets wrote the example dataset at first use"
    ids = pq.read_table(data, columns=["row_id"]).column("row_id").to_numpy()
    n_train = int((~tabular_data.is_val(ids, 0.2)).sum())
    trials = _trials(rec)
    assert len(trials) == 2 and all(t.status == "TERMINATED" and t.iterations == 2 for t in trials)
    for t in trials:
        for h in t.history:
            assert h["data/shards_disjoint"] == 1.0, "no row reached two workers"
            # streaming_split(equal=True) gives both workers the same row count: at most 1 row sits out
            assert h["data/rows_total"] == h["data/rows_unique"] == n_train - n_train % 2
            assert h["data/rows_seen"] == h["data/rows_total"] / 2, "rank 0 iterated only its half"
            assert h["data/val_rows_in_train"] == 0
            assert h["opt/lr"] == pytest.approx(2 * t.params["lr"]), "scale_lr: lr x 2 workers"
            assert h["opt/grad_accum_steps"] == 2 and h["sys/world_size"] == 2
            assert h["time/data_s"] > 0 and h["time/compute_s"] > 0 and 0 < h["time/data_frac"] < 1
        assert [h["epoch"] for h in t.history] == [1, 2]
        assert t.best_checkpoint
        saved = json.loads(Path(t.best_checkpoint, "meta.json").read_text())["epoch"]
        best = max(h["val/acc"] for h in t.history)
        assert saved in {h["epoch"] for h in t.history if h["val/acc"] == best}, "the checkpoint of its best epoch"
    assert max(max(t.values("val/acc")) for t in trials) >= 0.85, "it learned the wine classes"
    _assert_tracked(env, rec, n=2, epochs=2)


@pytest.mark.slow
def test_ray_data_sweep_promotes_with_the_files_validation_split(wine_sweep) -> None:  # noqa: ANN001
    """The accuracy promote records is the champion's accuracy on the Parquet file's own validation rows
    (recomputed here, from the file and the registered model)."""
    import mlflow
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    env, rec = wine_sweep
    proc = env.run("promote", "latest", "--model-name", "wine-test", check=True, timeout=600)
    assert "registered wine-test version 1 as @champion" in proc.stdout
    version = mlflow_client(env.tracking_uri).get_model_version_by_alias("wine-test", "champion")
    recorded = float(version.tags["accuracy"])
    params = rec["config"]["trainable"]["params"]
    data = {**(params.get("data") or {}), "path": str(env.home / "data" / "wine.parquet")}
    settings = tabular_data.data_settings({"data": data})
    table = pq.read_table(settings.path).to_pandas()
    val = table[tabular_data.is_val(table[settings.id_column].to_numpy(), settings.val_fraction)]
    assert 0 < len(val) < len(table), "the file's own split: some rows, not all"
    mlflow.set_tracking_uri(env.tracking_uri)
    model = mlflow.pyfunc.load_model("models:/wine-test@champion")
    features = tabular_data.feature_columns(settings)
    pred = model.predict(pd.DataFrame(val[features].to_numpy(np.float32), columns=features))
    ours = float(np.mean(pred["label"].to_numpy() == val[settings.label].to_numpy()))
    assert recorded == pytest.approx(ours), (recorded, ours, len(val))


@pytest.fixture(scope="module")
def charlm_sweep(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The two transformers tests share it. Why its own sweep: the transformers trainable (charlm) is the
    subject; no other sweep runs it."""
    env = SweepsEnv(tmp_path_factory.mktemp("charlm"))
    env.run("run", "+experiment=charlm", "sweep.num_samples=1", "scheduler=fifo",
            "search_space.lr={dist: grid, values: [0.002, 0.01]}", "trainable.num_workers=2",
            "trainable.params.epochs=2", "trainable.params.max_chars=8000", "trainable.params.val_chars=2048",
            "trainable.params.scale_lr=true", *FAST, check=True, timeout=1500)
    yield env, _record(env)
    env.cleanup()


@pytest.mark.slow
def test_transformers_sweep_reports_through_the_bridge(charlm_sweep) -> None:  # noqa: ANN001
    """Each trial's Trainer metrics reach Tune through the bridge, every epoch. Shares the module's transformers
    sweep (fixture ``charlm_sweep``, whose setup is this test's time) with the promotion test."""
    env, rec = charlm_sweep
    trials = _trials(rec)
    assert len(trials) == 2 and all(t.status == "TERMINATED" and t.iterations == 2 for t in trials)
    for t in trials:
        assert [h["epoch"] for h in t.history] == [1, 2]
        for h in t.history:
            assert h["eval_loss"] == h["val/loss"] and h["val/perplexity"] == pytest.approx(math.exp(h["val/loss"]))
            assert 0 <= h["val/acc"] <= 1 and h["opt/peak_lr"] == pytest.approx(2 * t.params["lr"])
            assert h["time/compute_s"] > 0 and 0 <= h["time/data_frac"] < 1
        steps = [h["train/global_step"] for h in t.history]
        assert steps[1] == 2 * steps[0] > 0, "optimizer steps keep counting across epochs"
        # the best checkpoint (both epochs' are kept: checkpoint.num_to_keep=2) is the lowest val/loss's epoch
        meta = json.loads(Path(t.best_checkpoint, "meta.json").read_text())
        lowest = min(t.history, key=lambda h: h["val/loss"])
        assert (meta["epoch"], meta["val/loss"]) == (lowest["epoch"], pytest.approx(lowest["val/loss"])), \
            (meta, [(h["epoch"], h["val/loss"]) for h in t.history])
        assert Path(t.best_checkpoint, "model.pt").is_file()
    best = min(min(t.values("val/loss")) for t in trials)
    assert best < math.log(charlm.CharTokenizer().vocab_size), "better than a uniform guess over the vocabulary"
    _assert_tracked(env, rec, n=2, epochs=2)


@pytest.mark.slow
def test_transformers_sweep_promotes_a_model_that_scores_raw_text_in_a_fresh_virtualenv(
        charlm_sweep, fresh_venv: FreshVenv) -> None:  # noqa: ANN001
    from importlib.metadata import version

    import mlflow

    env, _ = charlm_sweep
    proc = env.run("promote", "latest", "--model-name", "charlm-test", check=True, timeout=600)
    assert "registered charlm-test version 1 as @champion" in proc.stdout and "perplexity" in proc.stdout
    uri = "models:/charlm-test@champion"
    reqs = requirements_file(uri, env.tracking_uri)
    lines = Path(reqs).read_text().split()
    assert f"transformers=={version('transformers')}" in lines and "torch==2.13.0" in lines, lines
    fresh_venv.install_requirements(reqs)
    zen = charlm.zen_of_python()
    texts = ["", "B", "Beautiful is better than ugly.", zen[:300], "caf\u00e9 \u2603"]  # 0..300 chars, odd chars
    job = {"uri": uri, "frame": {"columns": ["text"], "data": [[t] for t in texts]}, "params": {"max_new_chars": 8}}
    result, where = fresh_venv.predict([job], env.tracking_uri, env.root / "charlm-pred.json")
    assert not where["sweeps"] and not where["trainables"], where
    pred = result["pred"]
    assert result["inputs"] == ["text"] and pred["chars"] == [len(t) for t in texts]
    assert pred["scored"] == [max(len(t) - 1, 0) for t in texts], "any length: every character after the first"
    assert all(math.isfinite(p) and 1.0 < p < charlm.CharTokenizer().vocab_size for p in pred["perplexity"][2:4]), \
        "the promoted weights beat a uniform guess, on text longer than the model's 64-character context too"
    assert [len(c) for c in pred["continuation"]] == [0, 8, 8, 8, 8]
    tags = mlflow_client(env.tracking_uri).get_model_version_by_alias("charlm-test", "champion").tags
    assert 1.0 < float(tags["perplexity"]) < charlm.CharTokenizer().vocab_size
    # the same answers here, in the project's environment, and over HTTP from the fresh one
    mlflow.set_tracking_uri(env.tracking_uri)
    mlflow.set_registry_uri(env.tracking_uri)
    here = mlflow.pyfunc.load_model(uri).predict(pd_frame(texts), params={"max_new_chars": 8})
    assert np.allclose(here["log_likelihood"], pred["log_likelihood"], atol=1e-4)
    with fresh_venv.serve(uri, env.tracking_uri, env.root / "serve-charlm.log") as url:
        served = invocations(url, {"dataframe_split": {"columns": ["text"], "data": [[t] for t in texts]},
                                   "params": {"max_new_chars": 8}})["predictions"]
    assert [p["continuation"] for p in served] == pred["continuation"]
    assert np.allclose([p["log_likelihood"] for p in served], pred["log_likelihood"], atol=1e-4)


def pd_frame(texts: list[str]) -> Any:
    import pandas as pd

    return pd.DataFrame({"text": texts})
