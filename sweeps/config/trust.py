"""Who may widen the ``_target_`` allowlist, and what no one may add to it.

The config is untrusted input, so the list that guards it cannot come from the same input. Packages are added
only from trusted places:

- ``security.allowed_targets`` in a YAML file under the conf directory (``$SWEEPS_CONF_DIR``, else ``conf/``),
  such as the experiment ``sweeps new trainable --from`` writes, with the packages written out literally;
- ``$SWEEPS_ALLOWED_TARGETS`` (comma-separated), set by the operator where the sweep runs.

Never from an override: a command-line override, a schedule's stored overrides and a resumed sweep's stored
overrides are all the same untrusted text, so one that sets ``security.*`` is refused (:func:`override_errors`),
and so is one that sets ``hydra.*`` (``hydra.searchpath`` would compose files from any folder). An
interpolation under ``security`` is refused too, since an override could change what it resolves to.

:data:`NEVER` lists packages whose members load or run code (unpickling, hub downloads, shell commands,
``eval``, another instantiate): an entry inside one of them, or holding one (``torch`` holds ``torch.hub``), is
refused wherever it comes from, and the resolver refuses any target defined inside one.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

ENV = "SWEEPS_ALLOWED_TARGETS"
GUARDED = ("security", "hydra")  # config an override may not set
STDLIB = frozenset(sys.stdlib_module_names) | {"builtins", "__main__"}
NEVER: dict[str, str] = {
    "torch.hub": "torch.hub.load runs a repository's hubconf.py",
    "torch.serialization": "torch.load unpickles",
    "torch.package": "a torch package imports and unpickles its own code",
    "torch.jit": "torch.jit.load loads serialized code",
    "torch.utils.cpp_extension": "compiles and loads C++",
    "torch.distributed": "its rpc runs functions on other processes",
    "pandas": "pandas.read_pickle and HDFStore unpickle, pandas.eval evaluates, and pandas' public names all "
              "claim the module pandas",
    "numpy": "numpy.load(allow_pickle=True) unpickles, and numpy's functions all claim the module numpy",
    "ray.util": "ray.util holds remote execution and multiprocessing",
    "ray._private": "Ray's internals start processes and run functions",
    "ray.cloudpickle": "unpickles",
    "ray.job_submission": "submits shell commands to a cluster",
    "ray.runtime_env": "installs packages and runs setup hooks",
    "hydra._internal": "Hydra's internals instantiate any target",
    "hydra.utils": "hydra.utils.instantiate/call/get_method reach any target",
    "omegaconf": "OmegaConf.load reads any file and resolvers run registered code",
    "sweeps": "its ops write crontabs and start sweeps, and its resolver is the gate itself",
    "dill": "unpickles", "cloudpickle": "unpickles", "joblib": "joblib.load unpickles",
    "yaml": "yaml.unsafe_load builds any Python object",
    "mlflow": "mlflow.pyfunc.load_model unpickles and mlflow.projects.run runs commands",
    "pip": "installs and runs packages", "setuptools": "runs setup scripts",
}
# The project's own schedulers (promotion ASHA, PASHA): a module that defines two TrialScheduler classes and
# nothing that loads or runs code. Only this exact module is exempt from the NEVER entry for ``sweeps``.
OWN_TARGETS = ("sweeps.execution.tuning.promotion",)
_OVERRIDE_KEY = re.compile(r"^[+~]*(?P<key>[^=~]*)")


def _inside(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def never(module: str) -> str | None:
    """Why code defined in ``module`` may never be a target (the standard library, a :data:`NEVER` package)."""
    if module in OWN_TARGETS:
        return None
    if module.split(".")[0] in STDLIB:
        return "the standard library can run arbitrary code"
    for prefix, why in NEVER.items():
        if _inside(module, prefix):
            return f"{prefix}: {why}"
    return None


def refused(package: str) -> str | None:
    """Why ``package`` may never be added to the allowlist: it is, or lies inside, or holds a NEVER package."""
    why = never(package)
    if why:
        return why
    held = [p for p in NEVER if _inside(p, package)]
    return f"it holds {held[0]} ({NEVER[held[0]]})" if held else None


def _guarded(key: str) -> bool:
    """``security.x``, ``hydra.searchpath``, ``hydra/launcher``, ``group@security``: all set guarded config."""
    key, _, package = key.partition("@")
    return any(re.split(r"[./]", part.strip())[0] in GUARDED for part in (key, package) if part.strip())


def override_errors(overrides: Sequence[str], conf_dir: str) -> list[str]:
    """Overrides that would set the allowlist (``security.*``) or Hydra's own settings (``hydra.*``)."""
    errors = []
    for o in overrides:
        m = _OVERRIDE_KEY.match(o)
        key = m.group("key").strip() if m else o
        if not _guarded(key):
            continue
        if re.split(r"[./@]", key)[0] == "hydra" or "@hydra" in key:
            errors.append(f"{key}: {o!r} sets Hydra's own settings, which an override may not (hydra.searchpath "
                          f"would compose config files from another folder); put config files under {conf_dir}")
        else:
            errors.append(f"{key}: {o!r} widens or changes the target allowlist from an override, which is not "
                          f"trusted (a schedule and a resume replay overrides); list the package under "
                          f"security.allowed_targets in a file under {conf_dir} (e.g. experiment/NAME.yaml), or "
                          f"set {ENV}=pkg[,pkg...] where the sweep runs")
    return errors


def interpolation_errors(unresolved: Mapping[Any, Any]) -> list[str]:
    """``${...}`` under ``security`` in the unresolved config: an override could change what it resolves to."""
    errors: list[str] = []

    def walk(node: Any, key: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, f"{key}.{k}")
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, str) and "${" in node:
            errors.append(f"{key}: {node!r} is an interpolation; write the package name itself in the file, or "
                          f"set {ENV} where the sweep runs")

    walk(unresolved.get("security"), "security")
    return errors


def env_targets() -> tuple[str, ...]:
    """The packages the operator added in ``$SWEEPS_ALLOWED_TARGETS`` (comma-separated; blanks ignored)."""
    return tuple(p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip())
