"""Which warm-start levers a sweep uses on the installed Ray, and why one is off: one place for run and doctor.

docs/ray.md, "Trial start-up". The levers:

- ``lean``: the lean trainer (:mod:`sweeps.execution.levers.lean_trainer`): Train's controller and workers on the job's
  runtime env, so they can take prestarted processes; no per-run placement-group cleaner or Data manager.
- ``pool``: warm processes prestarted on the trials' nodes while trials run (:mod:`sweeps.execution.warmstart.pool`),
  with torch and Ray Train imported ahead (embedded Ray only).
- ``reuse``: Tune's ``reuse_actors`` (a finished trial's driver process runs the next trial): off unless
  ``SWEEPS_REUSE_ACTORS=1``. Measured against it: Tune fails the *next* trial when the previous trial's
  function has not ended within ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (a trial whose node was lost), and a
  reused driver reported one Train worker's pid for three trials; the pool serves trial actors instead.

Each of them rests on levers (:mod:`sweeps.execution.levers`), checked against the installed Ray version and
the surfaces they call before the sweep starts; one that does not apply is off, with one log line saying why,
and the sweep runs the public path. ``SWEEPS_WARM=0`` turns every lever off (the cold path, a benchmark baseline).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from sweeps.execution.levers import core, lean_trainer, prestart, tune_actors

log = logging.getLogger(__name__)

SWITCH = "SWEEPS_WARM"


@dataclass(frozen=True)
class Levers:
    """Which levers are on; ``why_off`` says, per lever that is off, why (for the log line and doctor)."""

    lean: bool
    pool: bool
    reuse: bool
    why_off: dict[str, str]

    def describe(self) -> str:
        on = [name for name in ("lean", "pool", "reuse") if getattr(self, name)]
        off = [f"{name} off ({why})" for name, why in self.why_off.items()]
        return "; ".join([f"warm start: {', '.join(on) or 'none'}", *off])


def switched_off() -> bool:
    return os.environ.get(SWITCH, "1") == "0"


def levers(local: bool) -> Levers:
    """The levers for a sweep on the embedded Ray (``local``) or a remote cluster, on the installed Ray.

    ``lean`` needs the ``lean_trainer`` and ``tune_actors`` levers (:mod:`sweeps.execution.levers`), ``pool``
    the ``prestart`` lever and the lean trainer (Train's own processes never take prestarted ones)."""
    if switched_off():
        why = f"{SWITCH}=0"
        return Levers(False, False, False, {"lean": why, "pool": why, "reuse": why})
    why_off: dict[str, str] = {}
    lean_off = [f"{lv.name}: {core.reason(lv)}" for lv in (lean_trainer.LEVER, tune_actors.LEVER)
                if not core.applies(lv)]
    if lean_off:
        why_off["lean"] = "; ".join(lean_off)
    if not core.applies(prestart.LEVER):
        why_off["pool"] = f"prestart: {core.reason(prestart.LEVER)}"
    elif "lean" in why_off:
        why_off["pool"] = "needs the lean trainer (Train's own processes never take prestarted ones)"
    why_off["reuse"] = "opt-in (SWEEPS_REUSE_ACTORS=1): Tune fails the next trial when a reused driver is slow to end"
    return Levers("lean" not in why_off, "pool" not in why_off, False, why_off)


_current: Levers | None = None


def current(local: bool) -> Levers:
    """This process's levers, decided once (when Ray starts) and logged in one line."""
    global _current
    if _current is None:
        _current = levers(local)
        quiet = set(_current.why_off) <= {"reuse"} or switched_off()
        (log.info if quiet else log.warning)("%s", _current.describe())
    return _current
