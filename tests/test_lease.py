"""Holder identity (issue 32, part 4): a random token per process decides "mine"; host and pid decide nothing.

A pid is evidence only when the record proves it lives in this pid space (same boot id, same pid namespace)
and names its start time; otherwise the lease decides. Real processes, a real SQLite MLflow store.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import _template_store, dead_holder

from sweeps import lease
from sweeps.ops import lock as schedule_lock
from sweeps.tracking import client as tracking

OTHER_NS = "00000000-0000-0000-0000-000000000000/4026532999/12345"  # another machine's (or container's) pid space


def test_a_holder_reads_back_from_its_text_and_a_bare_host_pid_reads_without_a_token() -> None:
    me = lease.me()
    assert lease.Holder.parse(me.text()) == me and me.token and me.proc
    assert lease.driver_id() == me.text() and me.text().startswith(f"{lease.host()}:{os.getpid()} ")
    assert lease.Holder.parse("box-7:4242") == lease.Holder("box-7", 4242)  # written by older versions
    assert lease.Holder.parse("") == lease.Holder("", None)
    assert lease.Holder.parse("garbled").pid is None


def test_mine_is_the_token_never_host_and_pid() -> None:
    me = lease.me()
    twin = lease.Holder(me.host, me.pid, "f" * 32, OTHER_NS)  # another container: same hostname, same pid
    assert me.mine() and not twin.mine()
    assert not lease.Holder(me.host, me.pid).mine()  # a bare host:pid is nobody's
    assert lease.owner_alive(twin, time.time() + 60)  # a live lease elsewhere is respected
    assert not lease.owner_alive(twin, time.time() - 1)
    assert not lease.owner_alive(me, time.time() + 60)  # this process is no other owner


def test_a_pid_decides_only_with_proof_of_the_same_pid_space_and_process() -> None:
    me, dead = lease.me(), dead_holder()
    space, _, start = me.proc.rpartition("/")
    assert lease.running(me) is True
    assert lease.running(dead) is False
    reused = lease.Holder(me.host, me.pid, "r" * 32, f"{space}/{int(start) + 1}")  # our pid, an older process
    assert lease.running(reused) is False
    assert lease.running(lease.Holder(me.host, me.pid, "o" * 32, OTHER_NS)) is None
    assert lease.running(lease.Holder(dead.host, dead.pid)) is None  # a bare host:pid proves nothing


def test_alive_goes_by_the_lease_unless_the_pid_proves_it() -> None:
    now, dead, me = time.time(), dead_holder(), lease.me()
    legacy = lease.Holder(dead.host, dead.pid)
    assert lease.alive(legacy, now + 60, now) and not lease.alive(legacy, now - 1, now)
    assert lease.alive(legacy, None, now)  # no lease recorded: not ours to judge
    assert not lease.alive(dead, now + 60, now)  # provably gone: free at once
    assert lease.alive(me, now + 60, now) and not lease.alive(me, now - 1, now)


def test_a_forked_child_draws_its_own_token() -> None:
    parent = lease.me().token
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its token, then leave without running pytest's teardown
        os.write(write, lease.me().token.encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child and child != parent


def test_the_schedule_lock_says_gone_only_when_it_can_prove_it() -> None:
    dead = dead_holder()
    assert schedule_lock._gone({"pid": dead.pid, "host": dead.host, "token": dead.token, "proc": dead.proc})
    assert not schedule_lock._gone({"pid": dead.pid, "host": dead.host})  # older record: cannot tell


@pytest.fixture
def client(tmp_path: Path) -> Any:
    from mlflow.tracking import MlflowClient

    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def test_stale_runs_are_closed_by_token_and_lease_not_by_host_and_pid(client: Any) -> None:
    now, dead, me = time.time(), dead_holder(), lease.me()
    twin = lease.Holder(me.host, me.pid, "f" * 32, OTHER_NS)
    cases = {  # driver tag, lease -> closed?
        "dead here": (dead.text(), now + 60, True),
        "twin elsewhere, live": (twin.text(), now + 60, False),
        "twin elsewhere, expired": (twin.text(), now - 1, True),
        "old tag, live": (f"{dead.host}:{dead.pid}", now + 60, False),
        "old tag with our host:pid, live": (f"{me.host}:{me.pid}", now + 60, False),
        "old tag, expired": (f"{dead.host}:{dead.pid}", now - 1, True),
        "this process, expired": (me.text(), now - 1, False),
    }
    exp = client.create_experiment("e")
    runs = {name: client.create_run(exp, tags={
        tracking.RUN_TAG_SWEEP: name, tracking.RUN_TAG_KIND: "sweep", tracking.RUN_TAG_DRIVER: driver,
        tracking.RUN_TAG_LEASE: f"{expires:.0f}"}).info.run_id for name, (driver, expires, _) in cases.items()}
    tracking.close_stale_runs(client)
    closed = {name: client.get_run(run_id).info.status == "KILLED" for name, run_id in runs.items()}
    assert closed == {name: want for name, (_, _, want) in cases.items()}
