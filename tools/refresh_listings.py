"""Refresh the stored outputs of the listing cells, the cells that only show a source file.

    python tools/refresh_listings.py              # every notebook
    python tools/refresh_listings.py --check      # exit 1 if a listing is stale

A cell whose code is one ``show_source(...)`` call displays a file of the repository: its output
depends on that file alone, not on the GPU. When a shown file changes (a header gains a
function, a comment is reworded), this recomputes such outputs here, on any machine, instead
of re-executing the whole notebook on a GPU; every other output is left as the GPU run stored
it. ``pytest --nbval`` compares these outputs (text/markdown) like any other.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.build.skeletons import attempted  # noqa: E402
from kernels.course.book import notebooks  # noqa: E402
from kernels.course.notebook import show_source  # noqa: E402

# The names a listing cell may use (chapters pass paths relative to kernels/, solutions join
# SOLUTIONS with a file name).
NAMESPACE = {"os": os, "ROOT": str(ROOT), "SOLUTIONS": str(ROOT / "solutions" / "kernels"),
             "show_source": show_source}


def is_listing(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return False
    call = tree.body[0].value
    return isinstance(call, ast.Call) and getattr(call.func, "id", None) == "show_source"


def shows_a_learners_edit(source: str) -> bool:
    """Whether a listing cell shows an exercise file that a learner has edited: its stored
    output is the skeleton's, and stays so (kernels/build/skeletons.py)."""
    call = ast.parse(source).body[0].value
    if not call.args:
        return False
    return attempted(eval(compile(ast.Expression(call.args[0]), "<listing>", "eval"), dict(NAMESPACE)))


def listing_output(source: str, execution_count) -> dict:
    shown = eval(compile(source, "<listing>", "eval"), dict(NAMESPACE))
    return {"output_type": "execute_result", "execution_count": execution_count, "metadata": {},
            "data": {"text/markdown": shown.data, "text/plain": repr(shown)}}


def refresh(path: Path, write: bool = True) -> list[str]:
    """Recompute the notebook's listing outputs (in place when ``write``); the stale cells."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    stale = []
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    for number, cell in enumerate(code_cells, 1):
        if not is_listing(cell.source) or shows_a_learners_edit(cell.source):
            continue
        # A cell whose source was edited lost its count (tools/sync_notebooks.py); a cell with
        # outputs needs one ("unrun reference cell" to nbval): its place among the code cells.
        count = cell.get("execution_count") or number
        fresh = nbformat.from_dict(listing_output(cell.source.strip(), count))
        if cell.get("execution_count") != count or cell.outputs != [fresh]:
            stale.append(f"{path.relative_to(ROOT)}: {cell.source.strip()[:70]}")
            cell.execution_count, cell.outputs = count, [fresh]
    if stale and write:
        nbformat.write(notebook, path)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="report stale listings, change nothing")
    args = parser.parse_args()
    stale = [cell for path in notebooks() for cell in refresh(path, write=not args.check)]
    if args.check and stale:
        print("stale listings (run python tools/refresh_listings.py):\n  " + "\n  ".join(stale))
        return 1
    for cell in [] if args.check else stale:
        print(f"refreshed {cell}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
