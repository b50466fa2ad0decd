"""The operator's side of a running sweep: read its status, send it a control request and wait for the answer.

A sweep is named by its id (or ``latest``) in this machine's index, or by its experiment folder's URI
(``s3://bucket/sweeps/<sweep id>``), which is all another machine needs (:mod:`sweeps.live`).
"""

from __future__ import annotations

import time
from typing import Any

from sweeps import live, store, uris
from sweeps.errors import BadInput, SweepsError

ANSWER_WAIT_S = 30.0


def locate(ref: str) -> tuple[str, str]:
    """(sweep id, the folder of its current run) for a sweep id, ``latest``, or an experiment folder's URI."""
    if "://" in ref or ref.startswith(("/", ".")):
        status = live.read_status(ref, patient=True)  # the operator named it: it should be there
        if status is None:
            raise BadInput(f"SWEEP: {ref} holds no sweep status ({live.FOLDER}/status.json); name a sweep's "
                           f"experiment folder (storage.path/<sweep id>), or a sweep id of `python -m sweeps list`")
        return str(status.get("sweep_id") or uris.basename(ref)), ref
    try:
        rec = store.load(ref)
    except BadInput as exc:  # the command's argument is SWEEP: name it so
        raise BadInput(str(exc).replace("SWEEP_ID:", "SWEEP:", 1)) from None
    return rec.sweep_id, rec.experiment_dirs[-1]


def status(ref: str) -> dict[str, Any]:
    """The sweep's status as its driver last wrote it, with ``alive`` (its lease holds) and where it is."""
    sweep_id, where = locate(ref)
    found = live.read_status(where, patient=where == ref)  # named by its URI: no index here to fall back on
    if found is None:  # a sweep of an older version, or one that died before its first status
        rec = store.load(sweep_id)
        found = {"sweep_id": sweep_id, "state": rec.status, "trials": rec.counts, "best": rec.best or None,
                 "metric": rec.metric, "mode": rec.mode, "driver": {"host": rec.driver_host, "pid": rec.driver_pid,
                                                                    "lease_expires": rec.lease_expires}}
    alive = live.driver_alive(found)
    if found.get("state") in ("running", "paused", "stopping") and not alive:
        found["state_note"] = "its driver is gone (its lease expired)"
    return {**found, "alive": alive, "experiment_dir": where}


def _gone(sweep_id: str, current: dict[str, Any]) -> BadInput:
    return BadInput(f"SWEEP: sweep {sweep_id} is not running ({current.get('state')}"
                    f"{'; ' + current['state_note'] if current.get('state_note') else ''}); `python -m sweeps "
                    f"resume {sweep_id}` continues it, `python -m sweeps sync {sweep_id}` closes its runs")


def send(ref: str, verb: str, trial_id: str | None = None, wait_s: float = ANSWER_WAIT_S,
         wait_applied_s: float = 0.0) -> dict[str, Any]:
    """Send ``verb`` to the running sweep and return its driver's answer (with ``wait_applied_s``, its
    ``applied`` answer once it comes, else the ``accepted`` one); BadInput for a request that cannot apply
    (nothing is sent then), that the driver refused, or whose driver is gone."""
    current = status(ref)
    sweep_id = current["sweep_id"]
    if not current["alive"]:
        raise _gone(sweep_id, current)
    if current.get("stopping") and verb != "stop_now":
        raise BadInput(f"SWEEP: sweep {sweep_id} is already stopping (asked by {current['stopping'].get('by')}); "
                       f"`python -m sweeps stop {sweep_id} --now` ends it at once")
    where = current["experiment_dir"]
    request_id = live.submit(where, verb, str(current.get("run")), trial_id)
    answer = _wait_answer(where, request_id, wait_s)
    if answer is None:
        now = status(ref)
        if not now["alive"]:  # it died meanwhile (its lease expired, or its pid is gone)
            raise _gone(sweep_id, now)
        raise SweepsError(f"{verb}: sweep {sweep_id}'s driver did not answer within {wait_s:.0f} s (request "
                          f"{request_id}); it answers when it next reads its requests: see `python -m sweeps "
                          f"status {sweep_id}`")
    if answer.get("state") == "refused":
        raise BadInput(f"{verb}: sweep {sweep_id} refused it: {answer.get('why')}")
    out = {**answer, "sweep_id": sweep_id, "verb": verb}
    if wait_applied_s and out.get("state") == "accepted":
        out = wait_applied(ref, out, wait_applied_s)
    return out


def _wait_answer(where: str, request_id: str, wait_s: float) -> dict[str, Any] | None:
    """The driver's answer, or None after ``wait_s``, or at once when the driver is provably gone."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        answer = live.read_answer(where, request_id)
        if answer is not None:
            return answer
        found = live.read_status(where)
        if found is not None and not live.driver_alive(found):
            return live.read_answer(where, request_id)  # one it wrote just before it ended, else none
        time.sleep(0.5)
    return None


def wait_applied(ref: str, answer: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """After an ``accepted`` answer, wait until the driver says ``applied`` (a stopped trial, a stopped sweep)."""
    _, where = locate(ref)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = live.read_answer(where, answer["id"])
        if now and now.get("state") == "applied":
            return {**answer, **now}
        time.sleep(0.5)
    return answer
