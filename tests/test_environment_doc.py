"""docs/environment.md lists every environment variable the product reads or sets (``sweeps/``, ``trainables/``,
``hydra_plugins/``), and no ``SWEEPS_`` variable the code no longer reads. Fast tier: the code is read with
``ast``, nothing runs.

A variable counts when the code names it: a key of ``os.environ`` / ``os.getenv`` (a string, or a module
constant holding one), or any string constant named like a variable of sweeps, Ray, Tune, MLflow, torch and the
libraries the trainables use (an environment handed to a process, Ray's ``env_vars``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("sweeps", "trainables", "hydra_plugins")
TABLE = REPO / "docs" / "environment.md"
NAMED_LIKE = re.compile(r"^(?:SWEEPS|RAY|TUNE|MLFLOW|TORCH|NCCL|GLOO|OMP|MKL|HF|TRANSFORMERS|TOKENIZERS|AWS|MASTER|"
                        r"PL|CUDA|XDG|LIGHTNING|ROLE|GROUP|LOCAL|NODE)_[A-Z0-9_]+$|^PYTHON[A-Z]+$")
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
ACCESS = {"get", "setdefault", "pop", "getenv"}


def _files() -> Iterator[Path]:
    for top in PRODUCT:
        yield from sorted((REPO / top).rglob("*.py"))


def _constants(trees: list[ast.Module]) -> dict[str, set[str]]:
    """Every module-level ``NAME = "VALUE"`` of the product, by name (a constant that holds a variable's name)."""
    out: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(
                    node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out.setdefault(target.id, set()).add(node.value.value)
    return out


def _is_environ(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return text.endswith("environ") or text in ("os.getenv", "getenv")


def _keys(tree: ast.Module) -> Iterator[ast.AST]:
    """The key expressions of every ``environ[..]``, ``environ.get(..)`` (setdefault, pop), ``os.getenv(..)`` and
    ``.. in environ``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            yield node.slice
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if _is_environ(func) or (isinstance(func, ast.Attribute) and func.attr in ACCESS
                                     and _is_environ(func.value)):
                yield node.args[0]
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            yield node.left


def variables_in_code() -> dict[str, str]:
    """Each variable the product names -> one place that names it (``path:line``)."""
    parsed = [(path, ast.parse(path.read_text())) for path in _files()]
    constants = _constants([tree for _, tree in parsed])
    found: dict[str, str] = {}
    for path, tree in parsed:
        where = path.relative_to(REPO)
        for key in _keys(tree):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names = {key.value}
            elif isinstance(key, ast.Name | ast.Attribute):
                names = constants.get(key.id if isinstance(key, ast.Name) else key.attr, set())
            else:
                continue
            for name in names:
                if ENV_NAME.match(name):
                    found.setdefault(name, f"{where}:{key.lineno}")
        for node in _named_like(tree):
            found.setdefault(node.value, f"{where}:{node.lineno}")
    return found


def _named_like(tree: ast.Module) -> Iterator[ast.Constant]:
    """String constants named like a variable, and every key of a dict of them (``{"RANK": .., "MASTER_ADDR":
    ..}``); not an attribute's name (``has(ray._raylet, "RAY_..")``, ``getattr``) nor a name in ``__all__``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("has", "getattr", "hasattr"):
            names |= {id(a) for a in node.args[1:]}
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names |= {id(n) for n in ast.walk(node.value)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if any(NAMED_LIKE.match(k.value) for k in keys) and all(ENV_NAME.match(k.value) for k in keys):
                yield from keys
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED_LIKE.match(node.value) \
                and id(node) not in names:
            yield node


def variables_in_table() -> set[str]:
    """The first column of docs/environment.md's tables: ``NAME``."""
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", TABLE.read_text(), re.MULTILINE))


def test_the_table_lists_every_variable_the_code_reads_or_sets() -> None:
    missing = {name: where for name, where in variables_in_code().items() if name not in variables_in_table()}
    assert not missing, f"docs/environment.md lacks these variables (name | who sets it | effect): {missing}"


def test_the_table_names_no_sweeps_variable_the_code_no_longer_reads() -> None:
    stale = sorted(n for n in variables_in_table() - set(variables_in_code()) if n.startswith("SWEEPS_"))
    assert not stale, f"docs/environment.md lists SWEEPS_ variables no code reads: {stale}; drop their rows"


def test_the_table_is_linked_from_the_readme_and_the_operators_guide() -> None:
    for doc in ("README.md", "docs/operate.md"):
        assert "environment.md" in (REPO / doc).read_text(), f"{doc} does not link docs/environment.md"
