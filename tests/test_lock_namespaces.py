"""The promotion lock between two "hosts" with the same hostname and colliding pids (issue 32, part 4).

Each promoter runs in a PID and UTS namespace of its own (``unshare -fpu --mount-proc``) with the hostname
``same-name``: both are pid 1 of host ``same-name``, as two containers or CI runners often are. They share a
real SQLite MLflow store. Only the lock's token may tell them apart; host and pid must decide nothing.
Slow tier: each promoter imports MLflow in a fresh process, and the takeover waits out a (shortened) expiry.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _template_store

from sweeps.registry import lock

pytestmark = pytest.mark.slow

HOLDER = Path(__file__).resolve().parent / "lock_holder.py"
HOSTNAME = "same-name"


def _unshare_works() -> str:
    """"" when this machine lets us make PID+UTS namespaces, else why not."""
    try:
        proc = subprocess.run(["unshare", "-fpu", "--mount-proc", "sh", "-c", f"hostname {HOSTNAME} && test $$ = 1"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare cannot run here: {exc}"
    return "" if proc.returncode == 0 else f"unshare -fpu is not permitted here: {proc.stderr.strip()}"


@pytest.fixture
def store(tmp_path: Path) -> str:
    why = _unshare_works()
    if why:
        pytest.skip(why)
    shutil.copyfile(_template_store(), tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


class Box:
    """One lock_holder.py in a PID+UTS namespace of its own, hostname ``same-name``."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = ["unshare", "-fpu", "--mount-proc", "sh", "-c", f'hostname {HOSTNAME} && exec "$0" "$@"',
               sys.executable, str(HOLDER), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, **(env or {})})
        self.lines: list[str] = []

    def expect(self, word: str) -> list[str]:
        """The next line that starts with ``word`` (split); fails naming everything said so far."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith(word + " ") or line.strip() == word:
                return line.split()
        raise AssertionError(f"no {word!r} from {self.proc.args}: exit {self.proc.wait()}\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 120) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines += out.splitlines()
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # unshare and the namespace's pid 1 with it
        self.proc.wait()


@pytest.fixture
def boxes() -> Iterator[list[Box]]:
    started: list[Box] = []
    yield started
    for box in started:
        box.kill()


def test_two_promoters_with_one_hostname_and_one_pid_hold_the_lock_in_turn(store: str, boxes: list[Box],
                                                                          tmp_path: Path) -> None:
    go, inside = tmp_path / "go", tmp_path / "inside"
    boxes += [Box("race", store, "4", str(inside), str(go)) for _ in range(2)]
    for box in boxes:
        assert box.expect("ready")[1:] == [HOSTNAME, "1"]  # the collision is real: same host, same pid
    go.touch()
    for box in boxes:
        out = box.finish()
        assert box.proc.returncode == 0, out  # 3: both inside at once; 1: LockLost (one released the other's)
        assert out.count("round ") == 4, out
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=store, registry_uri=store)
    assert not [m.name for m in c.search_registered_models() if lock.is_lock(m.name)]


def test_a_holder_killed_in_one_namespace_is_taken_over_from_another_only_after_expiry(
        store: str, boxes: list[Box], tmp_path: Path) -> None:
    go, ttl = tmp_path / "go", {lock.TTL_ENV: "8"}
    holder, waiter = Box("hold", store, env=ttl), Box("wait", store, str(go), env=ttl)
    boxes += [holder, waiter]
    assert holder.expect("ready")[1:] == waiter.expect("ready")[1:] == [HOSTNAME, "1"]
    expires = float(holder.expect("held")[1])
    holder.kill()  # SIGKILL: no release; its pid 1 means nothing in the waiter's namespace
    go.touch()
    tried = float(waiter.expect("trying")[1])
    acquired = float(waiter.expect("acquired")[1])
    out = waiter.finish()
    assert waiter.proc.returncode == 0, out
    assert tried < expires - 1, f"the waiter began too late to prove anything (tried {tried}, expiry {expires})"
    assert acquired >= expires, f"taken over {expires - acquired:.1f} s before the dead holder's lock expired"
    assert acquired - expires < 10, out
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=store, registry_uri=store)
    assert not [m.name for m in c.search_registered_models() if lock.is_lock(m.name)]
