"""A running sweep's record in its own storage: its status, the control requests sent to it, and their answers.

Everything lives under ``<experiment>/sweeps-live/`` (a local folder or an object store: :mod:`sweeps.uris`), so
any shell on any machine that can read and write the sweep's storage can see and operate the sweep, with no
listener of its own (writing there is the authorisation). The driver writes ``status.json`` every few seconds
and at its end; an operator writes ``requests/<id>.json``; the driver answers each request once, in
``answers/<id>.json`` (accepted, applied or refused, with why), and only a request naming the driver's run
(``status.json``'s ``run``) can apply: a request for an earlier run of the same sweep is refused as stale.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import time
from typing import Any

from sweeps import lease, uris

FOLDER = "sweeps-live"
VERBS = ("stop", "stop_now", "pause", "unpause", "trial_stop")


def folder(experiment_dir: str) -> str:
    return uris.join(experiment_dir, FOLDER)


def write_atomic(location: str, data: bytes) -> None:
    """Write ``data`` so that a reader sees the old file or the new one, never a part: a temporary name then a
    rename on local disk; on an object store one put is atomic already."""
    if uris.is_remote(location):
        uris.write_bytes(location, data)
        return
    fs, path = uris.filesystem(location)
    tmp = f"{location}.tmp-{secrets.token_hex(4)}"
    uris.write_bytes(tmp, data)
    fs.move(uris.filesystem(tmp)[1], path)


def _write_json(location: str, data: dict[str, Any]) -> None:
    write_atomic(location, json.dumps(data, indent=1, sort_keys=True, default=str).encode())


READ_RETRIES_S = (0.2, 0.5, 1.0)  # a patient read that failed is asked again after these


def _read_json(location: str, patient: bool = False) -> dict[str, Any] | None:
    """The JSON object at ``location``, or None when there is none. ``patient``: a read that fails is asked again a
    few times (1.7 s in all), for a file that must be there: an object store may answer "no such key" or drop the
    connection while the driver replaces it (seen: `sweeps stop URI` refused right after `sweeps status URI` read
    the same file)."""
    for wait_s in (*(READ_RETRIES_S if patient else ()), None):
        try:
            data = json.loads(uris.read_bytes(location))
        except (FileNotFoundError, OSError, ValueError):
            if wait_s is None:
                return None
            time.sleep(wait_s)
            continue
        return data if isinstance(data, dict) else None
    return None


def write_status(experiment_dir: str, status: dict[str, Any]) -> None:
    _write_json(uris.join(folder(experiment_dir), "status.json"), status)


def read_status(experiment_dir: str, patient: bool = False) -> dict[str, Any] | None:
    """The sweep's status as its driver last wrote it (``patient``: see :func:`_read_json`)."""
    return _read_json(uris.join(folder(experiment_dir), "status.json"), patient)


def sender() -> dict[str, str]:
    """Who sends a request: user and host (what a person reads; the storage's access control authorises)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user database (a container): the variable, else unknown
        user = os.environ.get("USER", "unknown")
    return {"user": user, "host": lease.host()}


def submit(experiment_dir: str, verb: str, run: str, trial_id: str | None = None) -> str:
    """Write a control request for the run ``run`` of the sweep; returns its id."""
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}; verbs: {', '.join(VERBS)}")
    request_id = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    _write_json(uris.join(folder(experiment_dir), "requests", f"{request_id}.json"),
                {"id": request_id, "verb": verb, "run": run, "trial_id": trial_id, "sender": sender(),
                 "at": time.time()})
    return request_id


def requests(experiment_dir: str) -> list[dict[str, Any]]:
    """Every request in the sweep's record, oldest first."""
    where = uris.join(folder(experiment_dir), "requests")
    try:
        names = sorted(n for n in uris.listdir(where) if n.endswith(".json"))
    except (FileNotFoundError, OSError):
        return []
    found = (_read_json(uris.join(where, n)) for n in names)
    return [r for r in found if r and r.get("id")]


def answer(experiment_dir: str, request_id: str, state: str, why: str = "") -> None:
    """The driver's answer to a request: ``accepted``, ``applied`` or ``refused`` (and why). A later answer to
    the same request (``applied`` after ``accepted``) keeps the earlier one's time and words
    (``accepted_at``, ``accepted_why``) beside its own."""
    location = uris.join(folder(experiment_dir), "answers", f"{request_id}.json")
    now = time.time()
    before = _read_json(location) or {}
    kept = {k: v for k, v in before.items() if k.endswith(("_at", "_why"))}
    _write_json(location, {**kept, "id": request_id, "state": state, "why": why, "at": now,
                           f"{state}_at": now, f"{state}_why": why, "by": lease.me().label()})


def read_answer(experiment_dir: str, request_id: str) -> dict[str, Any] | None:
    return _read_json(uris.join(folder(experiment_dir), "answers", f"{request_id}.json"))


def answered(experiment_dir: str) -> set[str]:
    where = uris.join(folder(experiment_dir), "answers")
    try:
        return {n[: -len(".json")] for n in uris.listdir(where) if n.endswith(".json")}
    except (FileNotFoundError, OSError):
        return set()


def driver_alive(status: dict[str, Any], now: float | None = None) -> bool:
    """Whether the driver that wrote ``status`` may still run it: its lease, on any host's clock; and on the
    driver's own host (the same boot and pid namespace) its pid decides at once (:func:`sweeps.lease.alive`), so
    a killed driver is seen gone without waiting for its lease to expire."""
    driver = status.get("driver") or {}
    expires = driver.get("lease_expires")
    if status.get("state") not in ("running", "paused", "stopping") or not isinstance(expires, int | float):
        return False
    pid = driver.get("pid")
    holder = lease.Holder(str(driver.get("host") or ""), pid if isinstance(pid, int) else None,
                          str(driver.get("token") or ""), str(driver.get("proc") or ""))
    return lease.alive(holder, expires, time.time() if now is None else now)
