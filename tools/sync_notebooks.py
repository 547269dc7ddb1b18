"""Make each notebook's cells match its py:percent twin, keeping the stored outputs.

    python tools/sync_notebooks.py            # chapters/*.py and solutions/*.py -> .ipynb
    python tools/sync_notebooks.py --check    # exit 1 if a notebook differs from its twin

The ``.py`` twin is what we edit and review (notebooks diff badly); the ``.ipynb`` is what
Jupyter, Colab, nbval and the book read. Outputs of a cell survive a sync when its source is
unchanged; a changed cell loses its outputs until the notebook is executed again on a GPU
(or, where every changed cell is a CPU cell, until tools/fill_cpu_cells.py runs them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.course.book import twins  # noqa: E402

# Colab reads these when it opens a notebook from GitHub and asks for a GPU runtime (the free T4).
COLAB_GPU = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


def cells_of(notebook):
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", [])))
            for c in notebook.cells]


def synced(py: Path):
    """The notebook the twin describes, with outputs carried over from the stored .ipynb."""
    import jupytext
    import nbformat

    fresh = jupytext.read(py)
    ipynb = py.with_suffix(".ipynb")
    if ipynb.exists():
        stored = nbformat.read(ipynb, as_version=4)
        # Cells with the same source (the solutions' {solution-end} markers) are matched in
        # order, each stored cell once: their ids stay unique, and stable from sync to sync.
        old = {}
        for c in stored.cells:
            old.setdefault((c.cell_type, c.source.strip()), []).append(c)
        for cell in fresh.cells:
            matches = old.get((cell.cell_type, cell.source.strip()))
            if not matches:
                continue
            match = matches.pop(0)
            cell.id = match.get("id", cell.get("id"))  # stable ids keep the diffs small
            if cell.cell_type == "code":
                cell.outputs = match.outputs
                cell.execution_count = match.execution_count
        fresh.metadata.update({k: v for k, v in stored.metadata.items() if k == "course"})
    fresh.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}
    fresh.metadata.pop("jupytext", None)
    fresh.metadata.update(COLAB_GPU)
    return fresh


def main() -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for py in twins():
        notebook = synced(py)
        ipynb = py.with_suffix(".ipynb")
        if args.check:
            stored = nbformat.read(ipynb, as_version=4) if ipynb.exists() else None
            if stored is None or cells_of(stored) != cells_of(notebook) \
                    or any(stored.metadata.get(k) != v for k, v in COLAB_GPU.items()):
                stale.append(ipynb.relative_to(ROOT).as_posix())
        else:
            nbformat.write(notebook, ipynb)
    if stale:
        print("out of sync with their .py twins (run python tools/sync_notebooks.py):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
