"""GPU path: one trial with `trainable.use_gpu=true` (NCCL, one GPU per worker). Skipped without CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Sweep

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]


def test_gpu_trial_trains_on_cuda(sweep: Sweep) -> None:
    env = sweep.env
    n = torch.cuda.device_count()
    env.run("run", "+experiment=quickstart", "scheduler=fifo", "sweep.num_samples=1",
            "trainable.use_gpu=true", f"trainable.num_workers={min(n, 2)}",
            "trainable.resources_per_worker={CPU: 1, GPU: 1}", "trainable.params.epochs=3",
            "report.enabled=false", check=True)
    rec = Sweep.only(env).record()
    assert rec["status"] == "finished" and rec["best"]["value"] > 0.8
    # what the workers say they trained on (trainables.common.worker_facts), in Tune's result rows
    rows = [json.loads(line) for d in rec["experiment_dirs"] for f in Path(d).glob("*/result.json")
            for line in f.read_text().splitlines() if line.strip()]
    starts = [row for row in rows if "sys/workers" in row]
    assert starts, "no result row says where the workers trained"
    for row in starts:
        workers = json.loads(row["sys/workers"])
        assert [w["rank"] for w in workers] == list(range(min(n, 2))), workers
        assert all(w["device"] == f"cuda:{w['local_rank']}" for w in workers), workers  # no CPU fallback
        assert row["sys/backend"] == "nccl", row["sys/backend"]
