"""No dead function in the product: every module-level function of ``sweeps/``, ``trainables/`` and
``hydra_plugins/`` is named somewhere besides its own ``def`` (code, tests, configs, docs). Fast tier, read as
text: a name is counted as a whole identifier."""

from __future__ import annotations

import ast
import re
import subprocess
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("sweeps/", "trainables/", "hydra_plugins/")
READ = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".sh", ".ipynb", ".html", ".txt", ".json"}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    return [f for f in listed if (REPO / f).is_file()]


def unreferenced(files: list[str]) -> list[str]:
    """``path:line name`` of each module-level function of the product whose name stands nowhere but its def."""
    names: Counter[str] = Counter()
    for f in files:
        if Path(f).suffix in READ:
            names.update(IDENT.findall((REPO / f).read_text(errors="replace")))
    out = []
    for f in files:
        if not (f.startswith(PRODUCT) and f.endswith(".py")):
            continue
        for node in ast.parse((REPO / f).read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("__") \
                    and names[node.name] <= 1:
                out.append(f"{f}:{node.lineno} {node.name}")
    return out


def test_every_product_function_is_named_somewhere_besides_its_def() -> None:
    dead = unreferenced(_files())
    assert not dead, f"never called (delete them, or call them): {dead}"
