"""The Ray versions whose private surfaces sweeps was read against: one check for every use of them.

Private Ray internals (the warm start's lean trainer and pool, the loopback node address and rendezvous, the
stall watchdog's GCS tables) are used only on a Ray version in :data:`CHECKED`. On any other version each user
of them takes Ray's public path and says so; ``SWEEPS_TEST_RAY_VERSION`` pretends another version, so tests
run both paths on the installed Ray.
"""

from __future__ import annotations

import os

CHECKED = ("2.60.",)  # Ray versions whose internals sweeps' levers were read against
TEST_VERSION = "SWEEPS_TEST_RAY_VERSION"  # tests: pretend another Ray version (the public path)


def installed() -> str:
    """The installed Ray's version (or the one a test pretends)."""
    import ray

    return os.environ.get(TEST_VERSION) or ray.__version__


def unchecked() -> str | None:
    """Why Ray's internals may not be used here (a version they were not checked against), or None."""
    version = installed()
    if version.startswith(CHECKED):
        return None
    return f"ray {version} is not a version it was checked against ({', '.join(c.rstrip('.') for c in CHECKED)})"
