"""The house rules that keep ``sweeps/`` readable from its folder tree, checked on the source with ``ast``.

- Data flows one way: ``cli`` -> ``api`` -> ``ops`` -> ``registry`` -> ``reports`` -> (``execution``, ``tracking``) ->
  (``config``, ``store``) -> the base modules (``errors``, ``paths``, ``lease``). A module imports only from
  a lower layer or from its own package, and no two packages of one layer import each other.
- No import cycle inside a package; ``trainables/`` imports nothing from ``sweeps/``.
- Hydra and OmegaConf are imported by ``sweeps/config/compose.py`` only: everything after composition reads
  plain containers and the typed spec.
- The bundled examples (``trainables``) are imported only inside functions, and only by ``registry`` and the
  layers above it (promotion's fallback loader reads their common checkpoint layout): config, store,
  execution, tracking and reports run without them.
- A stored config is read through ``sweeps/config/stored.py`` (it parses the dict with the validator's
  readers): nowhere ``<x>.config.get(..)`` or ``<x>.config[..]``, nor on the spec's ``raw`` dict.
- Small modules, short functions; every module says its job in its first docstring line.
- Only the CLI prints; no docstring or comment points at a file outside the repository.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SWEEPS = REPO / "sweeps"
LAYERS = {
    "errors": 0, "paths": 0, "lease": 0, "uris": 0, "ports": 0, "__init__": 0,
    "store": 1, "config": 1, "trials": 1, "live": 1, "preemptions": 1,
    "execution": 2, "tracking": 2,
    "reports": 3,
    "registry": 4,
    "ops": 5,
    "api": 6,  # the Python API: what the CLI and a notebook share (sweeps/api/)
    "cli": 7, "__main__": 8,
}
HYDRA = ("hydra", "omegaconf")
HYDRA_IMPORTER = SWEEPS / "config" / "compose.py"
EXAMPLES = "trainables"
EXAMPLES_FROM_LAYER = LAYERS["registry"]
# The package's __init__ is its front door: it re-exports the exceptions, and hands out the API's names on first
# use (PEP 562 __getattr__, typed under TYPE_CHECKING) so `import sweeps` stays instant: the only imports that
# may point up or sideways.
FRONT_DOOR = {("sweeps", "errors"), ("sweeps", "api")}
MAX_MODULE_LINES = 320
MAX_FUNCTION_LINES = 60
OUTSIDE = re.compile(r"RAY_NOTES|shared/docs|\.\./shared|TESTING_REAL_PARTS|BAD_INPUTS\.md|HOUSE_STYLE")


def modules() -> list[Path]:
    return sorted(SWEEPS.rglob("*.py"))


def dotted(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def group(name: str) -> str:
    """``sweeps.ops.run`` -> ``ops``; ``sweeps.errors`` -> ``errors``; ``sweeps`` -> ``__init__``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_only(tree: ast.AST) -> set[int]:
    """The lines of ``if TYPE_CHECKING:`` blocks (imports for annotations only, never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(path: Path, runtime: bool = False) -> list[tuple[int, str]]:
    """Every ``sweeps...`` module a file imports, at module level or inside functions: (line, module);
    ``runtime``: not those under ``if TYPE_CHECKING:``."""
    out = []
    tree = ast.parse(path.read_text())
    skip = _type_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "sweeps"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "sweeps":
                continue
            for a in node.names:  # `from sweeps.ops import run` imports the module sweeps.ops.run
                sub = f"{node.module}.{a.name}"
                is_module = (REPO / Path(*sub.split("."))).with_suffix(".py").is_file() or (
                    REPO / Path(*sub.split("."))).is_dir()
                out.append((node.lineno, sub if is_module else node.module))
    return out


def packages_imported(path: Path) -> list[tuple[int, str, bool]]:
    """Every absolute import of a file: (line, top-level package, whether at module level)."""
    out: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((child.lineno, a.name.split(".")[0], not in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.append((child.lineno, child.module.split(".")[0], not in_function))
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(path.read_text()), False)
    return out


def test_every_group_has_a_layer() -> None:
    groups = {group(dotted(p)) for p in modules()}
    assert groups <= set(LAYERS), f"give these a layer in LAYERS: {sorted(groups - set(LAYERS))}"


def test_imports_only_flow_down() -> None:
    upward = []
    for path in modules():
        src = group(dotted(path))
        for line, target in imports(path):
            dst = group(target)
            if dst == src or (dotted(path), dst) in FRONT_DOOR:
                continue
            if LAYERS[dst] >= LAYERS[src]:
                upward.append(f"{path.relative_to(REPO)}:{line} ({src}, layer {LAYERS[src]}) imports {target} "
                              f"({dst}, layer {LAYERS[dst]})")
    assert not upward, "imports that do not flow down:\n" + "\n".join(upward)


def test_no_import_cycle_inside_a_package() -> None:
    graph: dict[str, set[str]] = {}
    for path in modules():
        name = dotted(path)
        graph[name] = {t for _, t in imports(path, runtime=True) if group(t) == group(name) and t != name and t in
                       {dotted(p) for p in modules()}}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def _drawing() -> Any:
    """scripts/architecture.py: execution/'s sub-folders in order (``ORDER``) and the docs' table of them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("architecture", REPO / "scripts" / "architecture.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# execution/'s sub-folders, lowest first: each imports only from those before it (and never in a loop)
EXECUTION_ORDER = _drawing().ORDER


def _sub(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["sweeps", "execution"] else None


def test_execution_sub_folders_import_only_down() -> None:
    rank = {n: i for i, n in enumerate(EXECUTION_ORDER)}
    found = {_sub(dotted(p)) for p in (REPO / "sweeps" / "execution").rglob("*.py")} - {None}
    assert found <= set(rank), f"give these a place in EXECUTION_ORDER: {sorted(found - set(rank))}"
    upward = []
    for path in sorted((REPO / "sweeps" / "execution").rglob("*.py")):
        src = _sub(dotted(path))
        for line, target in imports(path):
            dst = _sub(target)
            if src and dst and dst != src and rank[dst] > rank[src]:
                upward.append(f"{path.relative_to(REPO)}:{line} ({src}) imports {target} ({dst})")
    assert not upward, f"execution/ imports up its order {EXECUTION_ORDER}:\n" + "\n".join(upward)


def test_the_docs_draw_execution_as_the_tree_is() -> None:
    module = _drawing()
    doc = (REPO / "docs" / "architecture.md").read_text()
    head = "<!-- execution: generated by scripts/architecture.py -->\n"
    drawn = doc.split(head, 1)[1].split("\n<!-- /execution", 1)[0]
    assert drawn == module.table(), "docs/architecture.md: run `python scripts/architecture.py` and paste its table"


def test_ops_never_imports_ray_tune() -> None:
    """The sweep's record, lease and parent run live in ops/; Tune is the run's affair (execution/run/)."""
    bad = []
    for path in sorted((REPO / "sweeps" / "ops").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "ray":
                names += [f"ray.{a.name}" for a in node.names]
            bad += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names
                    if n == "ray.tune" or n.startswith("ray.tune.")]
    assert not bad, "\n".join(bad)


def test_no_extras_dict_carries_the_runs_state() -> None:
    """The run's state is typed fields of its session (sweeps.execution.run.session), not a dict of names."""
    from dataclasses import fields

    from sweeps.execution.run.session import Session

    assert "extras" not in {f.name for f in fields(Session)}
    assert not [p for p in (REPO / "sweeps").rglob("*.py") if ".extras[" in p.read_text() or ".extras.get(" in
                p.read_text()]


def test_trainables_import_nothing_from_sweeps() -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {t}" for p in sorted((REPO / "trainables").rglob("*.py"))
           for line, t in imports(p)]
    assert not bad, bad


def test_only_compose_imports_hydra() -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {pkg}" for p in modules() if p != HYDRA_IMPORTER
           for line, pkg, _ in packages_imported(p) if pkg in HYDRA]
    assert not bad, f"only {HYDRA_IMPORTER.relative_to(REPO)} may import Hydra/OmegaConf: {bad}"


def test_the_bundled_examples_are_imported_late_and_only_from_the_top_layers() -> None:
    bad = []
    for path in modules():
        layer = LAYERS[group(dotted(path))]
        for line, pkg, top in packages_imported(path):
            if pkg == EXAMPLES and (top or layer < EXAMPLES_FROM_LAYER):
                bad.append(f"{path.relative_to(REPO)}:{line} (layer {layer}) imports {pkg}"
                           f"{' at module level' if top else ''}")
    assert not bad, (f"{EXAMPLES} may be imported only inside functions of layer {EXAMPLES_FROM_LAYER} and above: "
                     f"{bad}")


def test_stored_configs_are_read_through_the_typed_reader() -> None:
    bad = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "get" else node.value if isinstance(node, ast.Subscript) else None
            if isinstance(target, ast.Attribute) and target.attr in ("config", "raw"):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, f"read a stored config with sweeps.config.stored, not by key: {bad}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(SWEEPS)))
def test_module_is_small_and_says_its_job(path: Path) -> None:
    text = path.read_text()
    tree = ast.parse(text)
    if path.name == "__main__.py":
        return
    doc = ast.get_docstring(tree)
    assert doc and doc.strip().splitlines()[0].strip(), f"{path.name}: first docstring line should state its job"
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name}: {len(text.splitlines())} lines"
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in funcs
            if n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_only_the_cli_prints() -> None:
    prints = []
    for path in modules():
        if group(dotted(path)) == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                prints.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not prints, prints


def test_nothing_points_outside_the_repository() -> None:
    roots = [SWEEPS, REPO / "trainables", REPO / "benchmarks", REPO / "tests", REPO / "docs", REPO / "conf"]
    files = [p for r in roots for p in r.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".yaml")]
    files.append(REPO / "README.md")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in files if p != Path(__file__)
            for i, line in enumerate(p.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, f"references to files outside the repository: {hits}"


def test_docs_the_code_cites_exist() -> None:
    cited = set()
    for path in [*modules(), *(REPO / "trainables").rglob("*.py")]:
        cited |= set(re.findall(r"docs/[\w./-]+\.md", path.read_text()))
    missing = sorted(c for c in cited if not (REPO / c).is_file())
    assert not missing, f"cited but missing: {missing}"


# -- the seam: private surfaces of Ray, Tune, Train, Optuna and Hydra only in sweeps/execution/levers/ ----------
LEVERS = SWEEPS / "execution" / "levers"
DEPENDENCIES = ("ray", "optuna", "hydra", "omegaconf")
PRIVATE_NAMES = ("run_metadata", "storage_filesystem")  # public-looking names of Tune's private bookkeeping
PRIVATE_TEXT = re.compile(r"ray\._private|ray\._raylet|\._internal|hydra\._internal")


def private_uses(path: Path) -> list[str]:
    """Every use of a private surface in a file: an import of a dependency's private module or name, any
    ``obj._name`` not on ``self``/``cls``/``super()``, Tune's private bookkeeping names, a ``__class__``
    assignment, and a private name handed to ``getattr``/``import_module`` as a string."""
    out = []

    def say(node: ast.AST, what: str) -> None:
        out.append(f"{path}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in DEPENDENCIES and any(p.startswith("_") for p in a.name.split(".")):
                    say(node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in DEPENDENCIES and (any(p.startswith("_") for p in parts)
                                             or any(a.name.startswith("_") for a in node.names)):
                say(node, f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute):
            dunder = node.attr.startswith("__") and node.attr.endswith("__")
            base = node.value
            own = (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super")
            if (node.attr.startswith("_") and not dunder and not own) or node.attr in PRIVATE_NAMES:
                say(node, ast.unparse(node))
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in targets):
                say(node, "__class__ = ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            texts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            on_self = bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")
            if name in ("getattr", "setattr", "hasattr") and texts and texts[-1].startswith("_") \
                    and not texts[-1].startswith("__") and not on_self:
                say(node, f"{name}(..., {texts[-1]!r})")
            if name in ("import_module", "__import__") and any(PRIVATE_TEXT.search(t) for t in texts):
                say(node, f"{name}({texts[0]!r})")
    return out


def imported_names(tree: ast.AST) -> dict[str, str]:
    """Every name a file binds by import (anywhere in it) -> the dotted path it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({(a.asname or a.name.split(".")[0]): (a.name if a.asname else a.name.split(".")[0])
                          for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update({(a.asname or a.name): f"{node.module}.{a.name}" for a in node.names})
    return names


def dotted_base(node: ast.expr, names: dict[str, str]) -> str | None:
    """``SearchAlgorithm`` or ``tune.Trainable`` as the dotted path the file's imports make of it."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        head = dotted_base(node.value, names)
        return f"{head}.{node.attr}" if head else None
    return None


def dependency_members(path: str) -> set[str] | None:
    """The private names a dependency's class and its bases define (members, and ``self._x`` they assign), or
    None when the class cannot be imported."""
    import importlib
    import inspect

    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    found = {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    for base in getattr(cls, "__mro__", (cls,)):
        if base.__module__.split(".")[0] not in DEPENDENCIES:
            continue
        try:
            found |= set(re.findall(r"self\.(_[A-Za-z]\w*)\s*(?::[^=\n]+)?=[^=]", inspect.getsource(base)))
        except (OSError, TypeError):  # compiled: its members are in dir() already
            pass
    return found


def own_members(cls: ast.ClassDef) -> set[str]:
    """The names a class defines itself: methods, class attributes and every ``self.x = ...`` of its methods."""
    found: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not cls:
            found.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign | ast.AugAssign) else []
        for t in targets:
            for leaf in ast.walk(t):
                if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) and leaf.value.id == "self":
                    found.add(leaf.attr)
                elif isinstance(leaf, ast.Name) and node in cls.body:
                    found.add(leaf.id)
    return found


def inherited_private_uses(path: Path) -> list[str]:
    """``self._x``, ``cls._x`` and ``super()._x`` in a class that subclasses a dependency's class, where ``_x`` is
    the dependency's (its class defines it), or is not the class's own (nothing in it defines it)."""
    tree = ast.parse(path.read_text())
    names = imported_names(tree)
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    out = []

    def lineage(cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> tuple[set[str], set[str], bool]:
        """(own names, the dependency's private names, whether a dependency's class is among its bases)."""
        own, theirs, external = own_members(cls), set(), False
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:  # a class of this file
                o, t, e = lineage(classes[base.id], seen | {cls.name})
                own, theirs, external = own | o, theirs | t, external or e
                continue
            dotted = dotted_base(base, names)
            if dotted and dotted.split(".")[0] in DEPENDENCIES:
                external = True
                theirs |= dependency_members(dotted) or set()
        return own, theirs, external

    for cls in classes.values():
        own, theirs, external = lineage(cls)
        if not external:
            continue
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            base = node.value
            on_self = isinstance(base, ast.Name) and base.id in ("self", "cls")
            on_super = isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
            if (on_self or on_super) and (node.attr in theirs or node.attr not in own):
                why = f"a base of {cls.name} from a dependency defines it" if node.attr in theirs else \
                    f"nothing in {cls.name} defines it"
                out.append(f"{path}:{node.lineno}: {ast.unparse(node)} ({why})")
    return out


def seam_files() -> list[Path]:
    files = [*modules(), *sorted((REPO / "hydra_plugins").rglob("*.py")), *sorted((REPO / EXAMPLES).rglob("*.py"))]
    return [p for p in files if LEVERS not in p.parents]


def test_private_surfaces_live_only_in_the_levers_folder() -> None:
    found = [use for p in seam_files() for use in [*private_uses(p), *inherited_private_uses(p)]]
    assert not found, ("private Ray/Tune/Train/Optuna/Hydra surfaces outside sweeps/execution/levers/ (move them "
                       "into a lever with a version check and a public fallback):\n" + "\n".join(found))


def test_the_seam_rule_refuses_a_planted_private_use(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(textwrap.dedent("""
        import ray._private.worker
        from ray.train.v2._internal.execution.controller import TrainController
        from ray.tune.execution.class_cache import _ActorClassCache
        def f(tuner, trial, searcher, x):
            tuner._local_tuner.get_run_config()
            trial.run_metadata.checkpoint_manager
            trial.storage.storage_filesystem
            searcher._ot_trials
            x.__class__ = int
            getattr(searcher, "_live_trials")
            self_like = x._thread_lock
    """))
    found = "\\n".join(private_uses(planted))
    for needle in ("import ray._private.worker", "ray.train.v2._internal", "_ActorClassCache", "_local_tuner",
                   "run_metadata", "storage_filesystem", "_ot_trials", "__class__ = ...", "'_live_trials'",
                   "_thread_lock"):
        assert needle in found, (needle, found)
    clean = tmp_path / "clean.py"
    clean.write_text("class A:\n    def f(self):\n        return self._x, super()._y, type(self).__name__\n")
    assert private_uses(clean) == []


def test_the_seam_rule_refuses_a_dependency_base_classs_private_member_on_self(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(textwrap.dedent("""
        from hydra.plugins.config_source import ConfigSource

        def make():
            from ray.tune.search import SearchAlgorithm

            class Gated(SearchAlgorithm):
                def __init__(self):
                    super().__init__()
                    self._mine = 0

                def is_finished(self):
                    return self._finished or self._mine

                def set_finished(self):
                    self._finished = True

            return Gated

        class Mixin:
            def _helper(self):
                return self._mine

        class Source(Mixin, ConfigSource):
            def load_config(self, path):
                return self._normalize_file_name(path), self._helper(), super()._get_header_dict("")

            def undefined(self):
                return self._nowhere
    """))
    found = "\n".join(inherited_private_uses(planted))
    for needle in ("self._finished (a base of Gated", "self._normalize_file_name (a base of Source",
                   "super()._get_header_dict", "self._nowhere (nothing in Source defines it)"):
        assert needle in found, (needle, found)
    assert "_mine" not in found and "_helper" not in found, found


def test_every_lever_has_a_version_check_a_probe_and_a_fallback() -> None:
    from sweeps.execution.levers import core

    levers = core.all_levers()
    assert len({lv.name for lv in levers}) == len(levers) >= 10
    for lv in levers:
        assert lv.checked and lv.package in core.DISTRIBUTIONS and lv.fallback and lv.what and callable(lv.probe)
    mentioned = (REPO / "docs" / "ray.md").read_text()
    missing = [lv.name for lv in levers if f"`{lv.name}`" not in mentioned]
    assert not missing, f"docs/ray.md's Levers table lacks {missing}"


def lever_objects() -> dict[str, tuple[str, str]]:
    """Each lever's name -> (its module's name in ``levers/``, the variable that holds it)."""
    import importlib

    from sweeps.execution.levers import core

    out = {}
    for path in sorted(LEVERS.glob("*.py")):
        if path.stem == "core" or path.stem.startswith("_"):
            continue
        module = importlib.import_module(f"sweeps.execution.levers.{path.stem}")
        out.update({v.name: (path.stem, k) for k, v in vars(module).items() if isinstance(v, core.Lever)})
    return out


def consulted(objects: dict[str, tuple[str, str]]) -> set[str]:
    """The levers whose object the product reads outside its own definition (``gcs_tables.LEVER`` handed to
    ``core.applies``, or its own module's ``LEVER``): where it is off, that code takes the fallback."""
    where = {(module, var): name for name, (module, var) in objects.items()}
    found: set[str] = set()
    for path in modules():
        if path.parent == LEVERS and path.stem == "core":
            continue  # core lists every lever (doctor's table); that decides nothing
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                found.add(where.get((node.value.id, node.attr), ""))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and path.parent == LEVERS:
                found.add(where.get((path.stem, node.id), ""))
    return found - {""}


def switched_off_in_tests() -> tuple[set[str], bool]:
    """The lever names some test turns off by name (``SWEEPS_LEVERS_OFF``), and whether some test pretends
    another Ray (``SWEEPS_TEST_RAY_VERSION``: every Ray lever off, their fallbacks run)."""
    named: set[str] = set()
    pretends = False
    for path in sorted((REPO / "tests").glob("*.py")):
        text = path.read_text()
        if re.search(r"SWEEPS_LEVERS_OFF|\bcore\.OFF\b", text):
            named |= {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant)
                      and isinstance(n.value, str)}
        pretends = pretends or bool(re.search(r"SWEEPS_TEST_RAY_VERSION|\bcore\.TEST_RAY_VERSION\b", text))
    return named, pretends


def test_every_levers_fallback_is_code_the_product_takes_and_a_test_runs() -> None:
    """A lever's ``fallback`` is a behaviour, not a label: the product asks about the lever (the code that asks
    takes the fallback where it is off), and some test turns it off, by name or, for a Ray lever, by pretending
    another Ray."""
    from sweeps.execution.levers import core

    objects = lever_objects()
    assert set(objects) == {lv.name for lv in core.all_levers()}
    unasked = sorted(set(objects) - consulted(objects))
    assert not unasked, f"levers the product never asks about (their private surface used unconditionally, or " \
                        f"not at all): {unasked}; gate the use on core.applies(<module>.LEVER)"
    named, pretends = switched_off_in_tests()
    untested = [lv.name for lv in core.all_levers() if lv.name not in named and not (pretends and lv.package == "ray")]
    assert not untested, f"no test runs these levers' fallbacks: {untested}; add one with SWEEPS_LEVERS_OFF=<name>"
