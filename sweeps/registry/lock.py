"""The promotion lock: one promotion at a time per model and alias, held in the registry itself.

The MLflow registry has one atomic primitive: ``create_registered_model(NAME)`` succeeds for exactly one caller
(the name is the key of the backing database table; every other caller gets ``RESOURCE_ALREADY_EXISTS``), on
the embedded SQLite store and through ``mlflow server`` alike. The lock is such a model,
``<model>@<alias>.promote-lock`` (``@`` cannot appear in a name ``sweeps`` registers), created with tags that
record its holder in the same call: a random token of this acquisition, the holding process
(:class:`sweeps.lease.Holder`: ``host:pid token=.. proc=..``) and an expiry. It is deleted on release.

- Ownership is the token, at every step: never host and pid (containers share hostnames, pids repeat).
- A create whose reply was lost (the client retried) is recognised by its own token.
- A lock whose holder is gone (expired; or provably dead in this pid namespace, :func:`sweeps.lease.alive`)
  is taken over through a second atomic create, a marker named after the stale token: only the marker's
  creator deletes the stale lock, so two waiters never delete each other's fresh one.
- ``check()`` re-reads the lock before the irreversible write (the alias move): still our token with at least
  ``margin_s()`` left before it expires, else LockLost. While we live, nobody may take it over before it
  expires, so the move is safe unless it stalls for longer than the margin (or clocks differ by more).
- ``release()`` re-reads the lock and deletes it only when the token is ours and the margin is left; a lock
  that is about to expire is left to expire (a waiter takes it over). The registry has no compare-and-delete:
  the delete could still remove a successor's lock if it followed the re-read by more than the margin.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sweeps import lease
from sweeps.errors import GateRefused

log = logging.getLogger(__name__)

SUFFIX = ".promote-lock"
TAG_HOLDER = "sweeps.lock.holder"  # the holding process: host:pid token=.. proc=.. (sweeps.lease.Holder)
TAG_TOKEN = "sweeps.lock.token"  # this acquisition's random token: what makes the lock ours
TAG_EXPIRES = "sweeps.lock.expires_at"  # epoch seconds
TTL_S = 600.0  # a holder's critical section (gate, log the model, register, alias) takes seconds
TTL_ENV = "SWEEPS_TEST_LOCK_TTL_S"  # tests only: a shorter TTL_S, so a takeover after expiry fits in a test
WAIT_S = 180.0


class LockLost(GateRefused):
    """The lock expired or was taken over while held: the alias is not moved."""


def lock_name(name: str, alias: str) -> str:
    return f"{name}@{alias}{SUFFIX}"


def is_lock(name: str) -> bool:
    """A lock or a takeover marker: registry entries that are no model."""
    return "@" in name and (name.endswith(SUFFIX) or f"{SUFFIX}.steal-" in name)


def ttl_s() -> float:
    """How long a lock holds (``TTL_S``; tests shorten it through ``SWEEPS_TEST_LOCK_TTL_S``)."""
    return float(os.environ.get(TTL_ENV) or TTL_S)


def margin_s() -> float:
    """Time that must be left on the lock for an irreversible step (the alias move, the delete)."""
    return ttl_s() / 10


def _code(exc: Exception) -> str:
    return str(getattr(exc, "error_code", ""))


def _tags(c: Any, name: str) -> dict[str, str] | None:
    """The lock model's tags, or None when there is no lock."""
    from mlflow.exceptions import MlflowException

    try:
        return dict(c.get_registered_model(name).tags or {})
    except MlflowException as exc:
        if _code(exc) == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise


def _create(c: Any, name: str, token: str) -> bool:
    """One atomic attempt: True when this call created the lock (or an earlier, retried call of ours did)."""
    from mlflow.exceptions import MlflowException

    tags = {TAG_HOLDER: lease.driver_id(), TAG_TOKEN: token, TAG_EXPIRES: f"{time.time() + ttl_s():.3f}"}
    try:
        c.create_registered_model(name, tags=tags, description="sweeps promotion lock: held while a promote "
                                  "moves this alias; deleted when it ends")
        return True
    except MlflowException as exc:
        # RESOURCE_DOES_NOT_EXIST: the insert lost to a holder that released before MLflow's store looked the
        # existing model up (its SQL store answers a unique-key clash that way); the caller tries again
        if _code(exc) == "RESOURCE_DOES_NOT_EXIST":
            return False
        if _code(exc) != "RESOURCE_ALREADY_EXISTS":
            raise
    held = _tags(c, name)
    return held is not None and held.get(TAG_TOKEN) == token


def _expires(tags: dict[str, str]) -> float:
    try:
        return float(tags[TAG_EXPIRES])
    except (KeyError, ValueError):
        return 0.0  # a lock without a readable expiry cannot be vouched for


def _holder(tags: dict[str, str]) -> lease.Holder:
    return lease.Holder.parse(tags.get(TAG_HOLDER, ""))


def _stale(tags: dict[str, str], now: float) -> bool:
    """Whether the recorded holder is gone: expired, or provably dead in this pid namespace."""
    return not lease.alive(_holder(tags), _expires(tags), now)


def _take_over(c: Any, name: str, stale: dict[str, str]) -> None:
    """Delete a stale lock, once: through the marker named after its token (an atomic create of its own)."""
    from mlflow.exceptions import MlflowException

    marker = f"{name}.steal-{stale.get(TAG_TOKEN, 'none')[:16]}"
    if not _create(c, marker, uuid.uuid4().hex):
        return  # another waiter is taking it over
    try:
        now = _tags(c, name)
        if now is not None and now.get(TAG_TOKEN) == stale.get(TAG_TOKEN):
            log.warning("promotion lock %s: holder %s is gone; taking over", name, _holder(stale).label())
            c.delete_registered_model(name)
    finally:
        try:
            c.delete_registered_model(marker)
        except MlflowException as exc:
            log.warning("promotion lock: could not delete the marker %s (%s)", marker, exc)


class PromotionLock:
    """A held lock: ``check()`` before an irreversible write; ``holder`` names who held it."""

    def __init__(self, c: Any, name: str, token: str) -> None:
        self.c, self.name, self.token = c, name, token
        self.waited_s = 0.0

    def check(self) -> None:
        """LockLost unless the lock is still ours (its token) with ``margin_s()`` left before it expires."""
        tags = _tags(self.c, self.name)
        if tags is None or tags.get(TAG_TOKEN) != self.token or _expires(tags) - time.time() < margin_s():
            raise LockLost(f"promote: the promotion lock {self.name} expired or was taken over while this "
                           f"promotion held it; the alias was not moved")


def acquire(c: Any, name: str, alias: str, wait_s: float = WAIT_S) -> PromotionLock:
    """Take the lock for ``name@alias``, waiting up to ``wait_s``; GateRefused names the holder on time-out."""
    lock, token = lock_name(name, alias), uuid.uuid4().hex
    start = time.monotonic()
    announced = False
    while True:
        if _create(c, lock, token):
            held = PromotionLock(c, lock, token)
            held.waited_s = time.monotonic() - start
            return held
        tags = _tags(c, lock)
        if tags is not None and _stale(tags, time.time()):
            _take_over(c, lock, tags)
            continue
        holder = _holder(tags).label() if tags is not None else "?"
        if time.monotonic() - start > wait_s:
            raise GateRefused(f"promote: {name}@{alias} is being promoted by {holder} (lock {lock}); waited "
                              f"{wait_s:.0f} s. Try again later, or delete the registered model {lock} if no "
                              f"promote is running")
        if not announced:
            log.info("promote: %s@%s is being promoted by %s; waiting for it", name, alias, holder)
            announced = True
        time.sleep(0.2 + random.random() * 0.3)


def release(held: PromotionLock) -> None:
    """Delete the lock if it is still ours (by token) and not about to expire; else leave it alone.

    A taken-over lock belongs to someone else now. One about to expire is left to expire: deleting it could
    race with a waiter's takeover and remove the next holder's lock.
    """
    from mlflow.exceptions import MlflowException

    try:
        tags = _tags(held.c, held.name)
        if tags is None or tags.get(TAG_TOKEN) != held.token:
            log.warning("promotion lock %s: no longer ours at release (expired and taken over); left alone",
                        held.name)
        elif _expires(tags) - time.time() < margin_s():
            log.warning("promotion lock %s: expires in under %.0f s; left to expire rather than deleted",
                        held.name, margin_s())
        else:
            held.c.delete_registered_model(held.name)
    except MlflowException as exc:
        log.warning("promotion lock %s: could not release it (%s); it expires on its own", held.name, exc)


@contextmanager
def holding(c: Any, name: str, alias: str, wait_s: float = WAIT_S) -> Iterator[PromotionLock]:
    """``with holding(client, name, alias) as lock:`` read the champion, gate, register, ``lock.check()``,
    move the alias."""
    held = acquire(c, name, alias, wait_s)
    try:
        yield held
    finally:
        release(held)
