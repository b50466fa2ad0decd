"""The same small sweep on the embedded local Ray and on a two-node local cluster with S3 storage and an MLflow
server: the wall-time ratio, and what object storage costs per trial.

The cluster (tests/cluster_harness.py): a 0-CPU head plus one worker node without this project (its own mount
namespace), token auth on; storage on a moto S3 server on 127.0.0.1; MLflow a lean `mlflow server` (SQLite +
artifacts proxied to the same S3). It is started before the timed runs (a cluster is long-lived); each timed
run is the whole `python -m sweeps run` command (connect, ship the code, trials, tracking, report). Local and
cluster runs alternate, so load from other work on the machine hits both alike; medians are printed.

Storage overhead per trial, measured two ways:
  direct: one real checkpoint of the cluster sweep (downloaded from S3), then timed as each epoch moves it:
          Train's rank 0 uploads it (local -> S3) and the trial's Tune report copies it (S3 -> S3), against the
          same two copies on the local disk (the embedded path); x checkpoints per trial.
  in situ: per report, the time between reports not spent training (time_this_iter_s - compute - data),
          cluster minus local, x reports per trial (includes everything a report costs, not only storage).

    python benchmarks/cluster.py [--repeats 2] [--trials 2] [--workers 2] [--epochs 4] [--uploads 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import REPO, load_average, median  # noqa: E402
from cluster_harness import Cluster, start_s3  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2, help="timed runs of each kind (alternating)")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--workers", type=int, default=2, help="Train workers per trial")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--uploads", type=int, default=5, help="timed copies of one checkpoint, each way")
    return p.parse_args()


def sweep_args(a: argparse.Namespace) -> list[str]:
    """Identical trials (one fixed configuration), so both runs do the same work."""
    return ["+experiment=quickstart", "scheduler=fifo", f"sweep.num_samples={a.trials}",
            f"sweep.max_concurrent_trials={a.trials}", f"trainable.num_workers={a.workers}",
            f"trainable.params.epochs={a.epochs}", "search_space.lr={dist: choice, values: [0.03]}",
            "search_space.hidden_size={dist: choice, values: [64]}",
            "search_space.batch_size={dist: choice, values: [32]}"]


def timed(args: list[str], home: Path, env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    env = {**env, "SWEEPS_HOME": str(home), "SWEEPS_CONF_DIR": str(REPO / "conf"), "RAY_TMPDIR": ray_tmp}
    before = {p.name for p in (home / "sweeps").glob("*.json")} if (home / "sweeps").is_dir() else set()
    home.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweeps", "run", *args], cwd=home, env=env, capture_output=True,
                          text=True, timeout=3600)
    wall = time.perf_counter() - t0
    shutil.rmtree(ray_tmp, ignore_errors=True)  # the embedded Ray stops with its driver
    if proc.returncode != 0:
        raise SystemExit(f"sweeps run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    (new,) = [p for p in (home / "sweeps").glob("*.json") if p.name not in before and not p.name.startswith(".")]
    return wall, json.loads(new.read_text())


def rows(rec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    from sweeps import uris

    out: dict[str, list[dict[str, Any]]] = {}
    for exp in rec["experiment_dirs"]:
        for name in uris.listdir(exp):
            f = uris.join(exp, name, "result.json")
            if name.startswith("run_trial") and uris.is_file(f):
                out[name] = [json.loads(x) for x in uris.read_text(f).splitlines() if x.strip()]
    return out


def report_gap(rec: dict[str, Any]) -> tuple[float, float]:
    """(median gap between reports beyond training, reports per trial) of a sweep."""
    gaps, counts = [], []
    for trial in rows(rec).values():
        counts.append(len(trial))
        gaps += [r["time_this_iter_s"] - r.get("time/compute_s", 0.0) - r.get("time/data_s", 0.0) for r in trial[1:]]
    return median(gaps), median([float(c) for c in counts])


def checkpoint_copies(rec: dict[str, Any], s3_uri: str, n: int) -> dict[str, float]:
    """Median seconds per copy of one real checkpoint: local->S3, S3->S3, and local->local (the embedded path)."""
    import pyarrow.fs as pafs

    from sweeps import uris

    exp = rec["experiment_dirs"][0]
    trial = next(t for t in uris.listdir(exp) if t.startswith("run_trial"))
    ckpt = uris.join(exp, trial, next(c for c in uris.listdir(uris.join(exp, trial)) if c.startswith("checkpoint_")))
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    try:
        src = uris.download(ckpt, str(tmp / "src"))
        size = sum(p.stat().st_size for p in Path(src).rglob("*") if p.is_file())
        s3, root = pafs.FileSystem.from_uri(s3_uri)
        local = pafs.LocalFileSystem()
        times: dict[str, list[float]] = {"upload": [], "s3_copy": [], "local_copy": []}
        for i in range(n):
            for kind, (sfs, spath, dfs, dpath) in {
                "upload": (local, src, s3, f"{root}/up{i}"),
                "s3_copy": (s3, f"{root}/up{i}", s3, f"{root}/copy{i}"),
                "local_copy": (local, src, local, str(tmp / f"copy{i}")),
            }.items():
                t0 = time.perf_counter()
                dfs.create_dir(dpath)
                pafs.copy_files(spath, dpath, source_filesystem=sfs, destination_filesystem=dfs)
                times[kind].append(time.perf_counter() - t0)
        return {"bytes": float(size), **{k: median(v) for k, v in times.items()}}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    a = parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    s3 = start_s3(root / "moto.log", bucket="bench")
    os.environ.update(s3.env)
    from sweeps.tracking import server as mlflow_server

    base = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cluster = Cluster(root, root / "user", base)
    srv = mlflow_server.start(f"sqlite:///{root / 'mlflow.db'}", artifacts_destination=s3.uri("mlflow"),
                              log_path=root / "mlflow.log", env={**base, "HOME": str(root / "user")})
    try:
        cluster.start_head(env=s3.env)
        cpus = a.trials * (1 + a.workers)
        cluster.start_worker(cpus, env=s3.env)
        remote = ["cluster=remote", f"cluster.address={cluster.address}", f"tracking.uri={srv.url}",
                  f"storage.path={s3.uri('sweeps')}"]
        cluster_env = {**os.environ, "HOME": str(cluster.home), "RAY_AUTH_MODE": "token"}
        local_env = {**os.environ, "HOME": str(root / "local-user")}
        walls: dict[str, list[float]] = {"local": [], "cluster": []}
        recs: dict[str, dict[str, Any]] = {}
        for i in range(a.repeats):
            for kind in ("local", "cluster"):
                args = sweep_args(a) + (remote if kind == "cluster" else [])
                wall, rec = timed(args, root / f"{kind}-home", cluster_env if kind == "cluster" else local_env)
                walls[kind].append(wall)
                recs[kind] = rec
                print(f"run {i + 1} {kind:7s}: {wall:6.1f} s  (load {load_average()})", flush=True)
        copies = checkpoint_copies(recs["cluster"], s3.uri("bench-copies"), a.uploads)
        gap_l, reports = report_gap(recs["local"])
        gap_c, _ = report_gap(recs["cluster"])
    finally:
        cluster.shutdown()
        srv.stop()
        s3.stop()
        shutil.rmtree(root, ignore_errors=True)
    loc, clu = median(walls["local"]), median(walls["cluster"])
    per_ckpt = copies["upload"] + copies["s3_copy"] - 2 * copies["local_copy"]
    ckpts = a.epochs  # checkpoint_every=1: one checkpoint per epoch
    print(f"\nsweep: {a.trials} trials x {a.workers} workers x {a.epochs} epochs (digits MLP), {a.repeats} run(s) each")
    print(f"local   (embedded Ray, SQLite, local disk)          : median {loc:6.1f} s  {walls['local']}")
    print(f"cluster (0-CPU head + 1 node, S3, MLflow server)     : median {clu:6.1f} s  {walls['cluster']}")
    print(f"ratio cluster / local                               : {clu / loc:.2f}x (goal <= 1.15x)")
    print(f"checkpoint ({copies['bytes'] / 1024:.0f} KiB): upload {copies['upload']:.3f} s, S3->S3 copy "
          f"{copies['s3_copy']:.3f} s, local copy {copies['local_copy']:.3f} s (medians of {a.uploads})")
    print(f"storage overhead per trial, direct : {per_ckpt:.3f} s per checkpoint x {ckpts} = {per_ckpt * ckpts:.2f} s")
    print(f"per-report gap beyond training     : local {gap_l:.3f} s, cluster {gap_c:.3f} s -> "
          f"{(gap_c - gap_l) * reports:+.2f} s per trial over {reports:.0f} reports (in situ, all report costs)")


if __name__ == "__main__":
    main()
