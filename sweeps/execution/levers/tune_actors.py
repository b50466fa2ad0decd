"""Lever ``tune_actors``: Tune's trial actors without a runtime env of their own, so they take warm processes.

Tune gives every trial actor ``{"env_vars": ...}`` (its actor-class cache), so the raylet never hands one a
process prestarted for the job. On the embedded Ray every variable it sets is already in the driver's
environment, which Ray's processes inherit: this lever patches Tune's private actor-class cache in the
sweep's driver to leave the runtime env out in that case (docs/ray.md, "Trial start-up"). Fallback: Tune's own
trial actors (a fresh interpreter each).
"""

from __future__ import annotations

import os
from typing import Any

from sweeps.execution.levers.core import Lever, binds, has


def check(class_cache: Any) -> str | None:
    """Tune's actor-class cache as the patched ``get`` uses it: the environment tables, ``get(trainable_cls)``
    and a ``_cache`` dict on a new cache."""
    if not isinstance(getattr(class_cache, "DEFAULT_ENV_VARS", None), dict) or not getattr(
            class_cache, "ENV_VARS_TO_PROPAGATE", None):
        return "Tune's trial-actor environment moved"
    if problem := has(class_cache, "_ActorClassCache"):
        return problem
    cache_cls = class_cache._ActorClassCache
    if problem := binds(getattr(cache_cls, "get", None), None, object):
        return problem
    return None if isinstance(getattr(cache_cls(), "_cache", None), dict) else "_ActorClassCache keeps no _cache dict"


def _probe() -> str | None:
    from ray.tune.execution import class_cache

    return check(class_cache)


LEVER = Lever(name="tune_actors", package="ray", checked=("2.60.",),
              what="Tune's trial actors take the processes Ray prestarts (no runtime env of their own)",
              fallback="Tune's own trial actors: a fresh interpreter each", probe=_probe)


def tune_actor_env() -> dict[str, str]:
    """The ``env_vars`` Tune gives every trial actor (its class cache: defaults plus variables it propagates)."""
    from ray.tune.execution import class_cache

    env = dict(class_cache.DEFAULT_ENV_VARS)
    env.update({k: os.environ[k] for k in class_cache.ENV_VARS_TO_PROPAGATE if k in os.environ})
    return env


def lean_trial_actors() -> None:
    """Embedded Ray, once the lever applies: patch Tune's actor-class cache in this process so a trial actor
    gets no runtime env of its own when it would only repeat what it inherits; anything else keeps Tune's own
    path."""
    import ray
    from ray.tune.execution import class_cache

    tune_get = class_cache._ActorClassCache.get
    if getattr(tune_get, "sweeps_lean", False):
        return

    def get(cache: Any, trainable_cls: Any) -> Any:
        if not hasattr(cache, "_cache") or any(os.environ.get(k) != v for k, v in tune_actor_env().items()):
            return tune_get(cache, trainable_cls)
        if trainable_cls not in cache._cache:
            cache._cache[trainable_cls] = ray.remote(trainable_cls)
        return cache._cache[trainable_cls]

    get.sweeps_lean = True  # type: ignore[attr-defined]
    class_cache._ActorClassCache.get = get  # type: ignore[method-assign]
