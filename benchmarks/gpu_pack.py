"""Packed single-worker trials on a real GPU (issue 50, part 4): ``trainable.pack=2`` on one GPU runs two trials at
once, each worker's CUDA allocator capped at half the device.

Needs one CUDA GPU (it refuses to run without one). A tiny sweep of the digits trainable, ``--samples`` trials
(default 2), ``scheduler=fifo``, each epoch stretched by ``epoch_sleep_s`` so the trials are long enough to
overlap. The loop is a probe around ``trainables.digits.train_loop``, written into the sweep's own folder (the
project's folder, importable by the embedded Ray's processes), that records in its worker, before training:
``torch.cuda.get_per_process_memory_fraction`` (set by ``sweeps`` before the loop), the device's memory, and
whether allocating 60% of the device fails (it must, at a 50% cap); and the wall-clock span of its training.

Asserted: the sweep finished; every trial's worker saw fraction 1/pack and was refused 60% of the device; at
least two trials' spans overlap; the dry run's plan says ``packing : 2 trials per GPU`` and 2 trials at a time
(``sweep.max_concurrent_trials`` is set to the trial count, so the GPU's share is what binds).

    python benchmarks/gpu_pack.py [--pack 2] [--samples 2] [--epochs 4] [--sleep 3] [--in-process]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from _common import REPO, run_cli

PROBE = "sweeps_gpu_pack_probe"
PROBE_SRC = '''
"""A probe loop for benchmarks/gpu_pack.py: what a packed worker sees, then the digits loop."""
import json
import os
import time


def train_loop(config):
    import torch

    from trainables.digits import train_loop as digits

    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).total_memory
    seen = {"trial": str(config.get("_trial_id")), "pid": os.getpid(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "fraction": torch.cuda.get_per_process_memory_fraction(device), "total_gib": total / 1024 ** 3}
    try:
        block = torch.empty(int(total * 0.6), dtype=torch.uint8, device=f"cuda:{device}")
        del block
        seen["over_cap_refused"] = False
    except torch.OutOfMemoryError:
        seen["over_cap_refused"] = True
    torch.cuda.empty_cache()
    seen["start"] = time.time()
    digits(config)
    seen["end"] = time.time()
    out = os.environ["SWEEPS_GPU_PACK_OUT"]
    with open(os.path.join(out, f"{seen['trial']}-{seen['pid']}.json"), "w") as f:
        json.dump(seen, f)
'''


def sweep_args(a: argparse.Namespace) -> list[str]:
    workers = ["trainable.num_workers=0"] if a.in_process else ["trainable.num_workers=1"]
    return ["+experiment=quickstart", "scheduler=fifo", f"sweep.num_samples={a.samples}",
            f"sweep.max_concurrent_trials={a.samples}", "trainable.use_gpu=true", *workers, f"trainable.pack={a.pack}",
            f"trainable.loop={PROBE}.train_loop", f"trainable.params.epochs={a.epochs}",
            f"+trainable.params.epoch_sleep_s={a.sleep}", "report.enabled=false", "promote.enabled=false"]


def overlapping(seen: list[dict[str, Any]]) -> int:
    """The most trials whose training spans overlap at one moment."""
    events = sorted([(s["start"], 1) for s in seen] + [(s["end"], -1) for s in seen])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pack", type=int, default=2)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--sleep", type=float, default=3.0, help="epoch_sleep_s: seconds added to each epoch")
    p.add_argument("--in-process", action="store_true", help="num_workers=0: the trial's own process trains")
    a = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_pack: no CUDA device here; run it on a machine with one GPU")
    home = Path(tempfile.mkdtemp(prefix="gpu-pack-"))
    out = home / "seen"
    out.mkdir()
    (home / f"{PROBE}.py").write_text(textwrap.dedent(PROBE_SRC))
    os.environ.update({"SWEEPS_ALLOWED_TARGETS": PROBE, "SWEEPS_GPU_PACK_OUT": str(out),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(home), os.environ.get("PYTHONPATH")]))})
    env = {**os.environ, "SWEEPS_HOME": str(home), "SWEEPS_CONF_DIR": str(REPO / "conf")}
    dry = subprocess.run([sys.executable, "-m", "sweeps", "run", *sweep_args(a), "--dry-run"], cwd=home, env=env,
                         capture_output=True, text=True, timeout=300)
    print(dry.stdout.split("plan           :")[-1] if dry.returncode == 0 else dry.stderr)
    assert dry.returncode == 0, dry.stderr
    assert f"packing        : {a.pack} trials per GPU" in dry.stdout, dry.stdout
    assert f"concurrent     : {min(a.pack, a.samples)} trial(s) at a time" in dry.stdout, dry.stdout
    wall, rec = run_cli(["run", *sweep_args(a)], home, timeout=1800)
    seen = [json.loads(f.read_text()) for f in sorted(out.glob("*.json"))]
    for s in seen:
        print(f"trial {s['trial']} pid {s['pid']} CUDA_VISIBLE_DEVICES={s['visible']}: memory fraction "
              f"{s['fraction']:.3f} of {s['total_gib']:.1f} GiB (cap {s['fraction'] * s['total_gib']:.1f} GiB), "
              f"60% refused: {s['over_cap_refused']}, trained {s['end'] - s['start']:.1f} s")
    most = overlapping(seen)
    print(f"sweep {rec['status']} in {wall:.1f} s; {len(seen)} trial(s) seen, at most {most} at once")
    assert rec["status"] == "finished", rec["status"]
    assert len(seen) == a.samples, f"{len(seen)} probe records for {a.samples} trials"
    assert all(abs(s["fraction"] - 1 / a.pack) < 1e-6 for s in seen), [s["fraction"] for s in seen]
    assert all(s["over_cap_refused"] for s in seen) or a.pack == 1, "a worker allocated past its cap"
    assert most >= min(a.pack, a.samples), f"at most {most} trial(s) trained at once; expected {a.pack}"
    print("gpu_pack: OK")


if __name__ == "__main__":
    main()
