"""The decisive test of issue 43: is a Train worker's 2-3 s start Ray's floor, or processes that are not warm yet?

Each round starts the embedded Ray as a sweep does (torch preloaded into its processes, the lean trainer, the
loopback rendezvous), asks the raylet for the processes one 2-worker fit takes (its controller, the
controller's synchronization actor, two workers), then runs one lean ``TorchTrainer.fit()`` whose loop runs one
torch forward pass and reports once:

- ``idle``: the fit starts once every process of the raylet is registered, idle and quiet (no CPU for
  ``--quiet`` seconds): every process it takes has imported torch already;
- ``now``: the fit starts at once, while the processes are still starting and importing;
- ``site``: as ``now``, with the preload done before each process registers with the raylet (the
  ``site_preload`` lever: a process is leasable only once warm).

The controller is an actor of its own here (``controller_in_trial`` off), as in the issue's measurement.

Printed per round: seconds from ``fit()`` to Train's controller up, to the workers' actors up
(``before_init_train_context``), to the process group, to rank 0's loop, to its first forward pass and to the
report's return; and, per process the fit took, whether it was idle and quiet when the fit began. Rounds
alternate between the cases; each round is a fresh Ray.

    python benchmarks/warm_probe.py [--rounds 3] [--cases idle now] [--quiet 1.0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, median  # noqa: E402

POINTS = ("controller_up", "workers_up", "process_group_ready", "loop", "forward", "reported", "fit_end")


def loop(config: dict[str, Any]) -> None:
    """One forward pass, one report; rank 0 stamps its points."""
    import ray.train
    import torch

    from sweeps.execution.train import stages

    rank = ray.train.get_context().get_world_rank()
    if rank == 0:
        stages.stamp("probe", "loop")
    model = torch.nn.Linear(8, 2)
    model(torch.zeros(1, 8))
    if rank == 0:
        stages.stamp("probe", "forward")
    ray.train.report({"x": 1.0})


def proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def workers_of_raylet() -> dict[int, str]:
    """The raylet's Python worker processes (pid -> process title)."""
    from sweeps.execution.warmstart import pool

    out = {}
    for raylet in pool.child_pids(os.getpid()):
        if any("raylet" in part for part in pool.cmdline(raylet)[:1]):
            for pid in pool.child_pids(raylet):
                cmd = pool.cmdline(pid)
                if cmd and (cmd[0].startswith("ray::") or any("default_worker" in c for c in cmd[:3])):
                    out[pid] = cmd[0]
    return out


def wait_quiet(expected: int, quiet_s: float, timeout_s: float = 120.0, top_up: Any = None) -> float:
    """Wait until at least ``expected`` worker processes are idle and none used CPU for ``quiet_s``;
    ``top_up(n)`` asks for ``n`` more when fewer are there (the raylet starts only a few at once)."""
    t0 = time.time()
    asked = 0.0
    last = {pid: proc_cpu(pid) for pid in workers_of_raylet()}
    still_since = time.time()
    while time.time() - t0 < timeout_s:
        time.sleep(0.2)
        now = workers_of_raylet()
        cpu = {pid: proc_cpu(pid) for pid in now}
        idle = [p for p, title in now.items() if title.startswith("ray::IDLE")]
        if any(abs(cpu[p] - last.get(p, -1.0)) > 0.005 for p in cpu) or len(idle) < expected:
            still_since = time.time()
        if top_up is not None and len(now) - 2 < expected and time.time() - asked > 2.0:  # 2: Ray's own agents
            top_up(expected - (len(now) - 2))
            asked = time.time()
        last = cpu
        if time.time() - still_since >= quiet_s:
            return time.time() - t0
    return float("nan")


def round_(case: str, quiet_s: float, workdir: Path) -> dict[str, Any]:
    import ray
    import ray.train

    from sweeps.execution.cluster import loopback, raystart
    from sweeps.execution.levers import lean_trainer, prestart, raylet_config, site_preload
    from sweeps.execution.train import stages
    from sweeps.execution.warmstart import pool
    from sweeps.ops.prepare import prepare

    log = workdir / f"stamps-{case}-{time.time_ns()}.jsonl"
    os.environ[stages.STAGE_ENV] = str(log)
    os.environ.update(raystart.train_env(prepare(["+experiment=quickstart"])))  # what a sweep's processes get
    loopback.enter_local()
    if case == "site":
        site_preload.install(raylet_config.PRELOAD)
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False,  # idle processes kept: up to 6
             **raylet_config.init_kwargs(preload=case != "site"))
    try:
        p = pool.Pool(per_trial=5, concurrency=1, total_trials=1)
        waited = wait_quiet(2, quiet_s) if case == "idle" else 0.0  # Ray's own first prestart settled
        prestart.request(p.address, p.job_id, p.runtime_env, 5, 120)  # + Train's state actor (once a cluster)
        if case == "idle":
            waited += wait_quiet(5, quiet_s, top_up=lambda n: prestart.request(p.address, p.job_id, p.runtime_env,
                                                                                n, 120))
        before = {pid: (title, proc_cpu(pid)) for pid, title in workers_of_raylet().items()}
        cls, named = lean_trainer.trainer(f"sweeps:probe:{case}:{time.time_ns()}")
        trainer = cls(loop, torch_config=loopback.torch_config(),
                      scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                      run_config=ray.train.RunConfig(name=f"probe-{time.time_ns()}", storage_path=str(workdir),
                                                     callbacks=[*named, *stages.train_callbacks()]))
        t0 = time.time()
        stages.stamp("probe", "fit")
        trainer.fit()
        stages.stamp("probe", "fit_end")
        rows = [json.loads(x) for x in log.read_text().splitlines()]
        at = {r["stage"]: r["t"] - t0 for r in rows if r["stage"] != "train_log"}
        pids = next((r.get("pids") or [] for r in rows if r["stage"] == "workers_up"), [])
        ctrl = next((r["pid"] for r in rows if r["stage"] == "controller_up"), None)
        took = {"controller": ctrl, **{f"worker{i}": pid for i, pid in enumerate(pids)}}
        state = {k: ("idle+quiet" if pid in before and before[pid][0].startswith("ray::IDLE")
                     else "starting" if pid in before else "fresh") for k, pid in took.items()}
        return {"case": case, "waited_s": waited, "points": at, "took": state,
                "train_log": {r["what"]: r["seconds"] for r in rows if r["stage"] == "train_log"}}
    finally:
        ray.shutdown()
        loopback.leave_local()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cases", nargs="+", default=["idle", "now", "site"])
    p.add_argument("--quiet", type=float, default=1.0)
    p.add_argument("--out", default="")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        work = Path(tempfile.mkdtemp(prefix="warm-probe-"))
        print("PROBE " + json.dumps(round_(a.child, a.quiet, work)), flush=True)
        return
    lines = [f"$ python benchmarks/warm_probe.py --rounds {a.rounds} --cases {' '.join(a.cases)} --quiet {a.quiet}",
             f"load {load_average()}"]
    got: dict[str, list[dict[str, Any]]] = {c: [] for c in a.cases}
    for i in range(a.rounds):
        for case in a.cases if i % 2 == 0 else a.cases[::-1]:
            ray_tmp = tempfile.mkdtemp(prefix="wp", dir="/tmp")
            env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(REPO),
                   "SWEEPS_LEVERS_OFF": "controller_in_trial"}
            proc = subprocess.run([sys.executable, __file__, "--child", case, "--quiet", str(a.quiet)], env=env,
                                  capture_output=True, text=True, timeout=600)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE ")), None)
            if line is None:
                sys.exit(f"round {case} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            r = json.loads(line[6:])
            got[case].append(r)
            pts = ", ".join(f"{k} {r['points'][k]:.2f}" for k in POINTS if k in r["points"])
            lines.append(f"  {case:<5} (waited {r['waited_s']:.1f} s for quiet): {pts}; took "
                         + ", ".join(f"{k} {v}" for k, v in r["took"].items()) + f"; load {load_average()}")
            print(lines[-1], flush=True)
    lines.append("median seconds after fit() (rank 0's points):")
    for case, rs in got.items():
        lines.append(f"  {case:<5}: " + ", ".join(
            f"{k} {median([r['points'][k] for r in rs if k in r['points']]):.2f}" for k in POINTS))
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
