"""Lever ``auth_refresh``: Ray's cached config re-read after ``RAY_AUTH_MODE`` was set in a process that had
already imported Ray.

Ray reads ``RAY_AUTH_MODE`` into its config when it is imported; a driver that sets it later (a notebook that
imported Ray first) must re-initialise that config, as Ray's own ``enable_token_auth`` does, through the
private ``ray._raylet.Config``. Fallback: the variable is set before Ray is imported (the CLI), else the sweep
asks the user to export it.
"""

from __future__ import annotations

from typing import Any

from sweeps.execution.levers.core import Lever, binds, first, has


def check(config: Any) -> str | None:
    """Ray's config class takes the call :func:`refresh` makes: ``Config.initialize("")``."""
    return first(has(config, "initialize"), binds(getattr(config, "initialize", None), ""))


def _probe() -> str | None:
    import ray._raylet

    return first(has(ray._raylet, "Config"), check(getattr(ray._raylet, "Config", None)))


LEVER = Lever(name="auth_refresh", package="ray", checked=("2.53.", "2.54.", "2.55.", "2.56.", "2.60."),
              what="Ray's config re-read after sweeps set RAY_AUTH_MODE=token (Ray already imported)",
              fallback="RAY_AUTH_MODE is set before Ray is imported, or the sweep asks for it", probe=_probe)


def refresh() -> None:
    """Re-read Ray's config from the environment (raises what Ray raises)."""
    from ray._raylet import Config  # type: ignore[attr-defined]

    Config.initialize("")
