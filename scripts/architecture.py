"""Print the table of ``sweeps/execution/``'s sub-folders as docs/architecture.md shows it, from the tree.

Each row is a sub-folder in the order the architecture test enforces (``tests/test_architecture.py``,
``EXECUTION_ORDER``: each imports only from the rows above it), with its package docstring's first line and its
modules. ``python scripts/architecture.py`` prints it; the test holds the docs' copy equal to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("levers", "resources", "warmstart", "cluster", "train", "tuning", "run")


def table() -> str:
    rows = ["| order | `sweeps/execution/...` | what it holds | modules |", "| --- | --- | --- | --- |"]
    for i, name in enumerate(ORDER, 1):
        folder = ROOT / "sweeps" / "execution" / name
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        mods = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__" and not p.stem.startswith("_"))
        rows.append(f"| {i} | `{name}/` | {first} | {', '.join(f'`{m}`' for m in mods)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    sys.stdout.write(table() + "\n")
