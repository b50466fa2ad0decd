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


def _write_json(location: str, data: dict[str, Any]) -> None:
    uris.write_bytes(location, json.dumps(data, indent=1, sort_keys=True, default=str).encode())


def _read_json(location: str) -> dict[str, Any] | None:
    try:
        data = json.loads(uris.read_bytes(location))
    except (FileNotFoundError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_status(experiment_dir: str, status: dict[str, Any]) -> None:
    _write_json(uris.join(folder(experiment_dir), "status.json"), status)


def read_status(experiment_dir: str) -> dict[str, Any] | None:
    return _read_json(uris.join(folder(experiment_dir), "status.json"))


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
    """The driver's answer to a request: ``accepted``, ``applied`` or ``refused`` (and why)."""
    _write_json(uris.join(folder(experiment_dir), "answers", f"{request_id}.json"),
                {"id": request_id, "state": state, "why": why, "at": time.time(), "by": lease.me().label()})


def read_answer(experiment_dir: str, request_id: str) -> dict[str, Any] | None:
    return _read_json(uris.join(folder(experiment_dir), "answers", f"{request_id}.json"))


def answered(experiment_dir: str) -> set[str]:
    where = uris.join(folder(experiment_dir), "answers")
    try:
        return {n[: -len(".json")] for n in uris.listdir(where) if n.endswith(".json")}
    except (FileNotFoundError, OSError):
        return set()


def driver_alive(status: dict[str, Any], now: float | None = None) -> bool:
    """Whether the driver that wrote ``status`` may still run it (its lease, on any host's clock)."""
    driver = status.get("driver") or {}
    expires = driver.get("lease_expires")
    return status.get("state") in ("running", "paused", "stopping") and isinstance(expires, int | float) and \
        expires > (time.time() if now is None else now)
