"""Fill in the outputs of the CPU cells whose code changed, on this machine, keeping every other
output as the GPU run stored it.

    python tools/fill_cpu_cells.py chapters/01_naive_pytorch.ipynb ...

tools/sync_notebooks.py empties a cell whose code changed (no outputs, no execution count).
When every such cell is a CPU cell (not tagged ``gpu``), its output does not depend on the GPU:
it reads the results data, shows a file, or computes on the CPU, which is what ``pytest --nbval``
checks on CI. This runs the notebook's CPU cells in order in a fresh kernel (the ``gpu`` cells
are not run) and stores the outputs of the emptied ones only. A changed ``gpu`` cell needs the
GPU: the tool refuses, and names it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.course.notebook import SETUP_TAG  # noqa: E402


def emptied(cell) -> bool:
    # The setup cell (SETUP_TAG) is stored without outputs on purpose: not emptied.
    return (cell.cell_type == "code" and cell.get("execution_count") is None and not cell.outputs
            and SETUP_TAG not in cell.metadata.get("tags", []))


def fill(path: Path, timeout: int = 600) -> list[int]:
    """Run the CPU cells of ``path``; store the outputs of the emptied ones; their indices."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    todo = [i for i, cell in enumerate(notebook.cells) if emptied(cell)]
    gpu = [i for i in todo if "gpu" in notebook.cells[i].metadata.get("tags", [])]
    if gpu:
        raise SystemExit(f"{path}: cells {gpu} changed and need the GPU: execute the notebook "
                         f"there (tools/gpu_run.sh execute)")
    if not todo:
        return []
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code" or "gpu" in cell.metadata.get("tags", []):
                continue
            stored = (cell.outputs, cell.get("execution_count"))
            client.execute_cell(cell, index)
            if index not in todo:
                cell.outputs, cell.execution_count = stored
    for index in todo:  # the count a cell would have had: its place among the code cells
        notebook.cells[index].execution_count = sum(
            1 for c in notebook.cells[:index + 1] if c.cell_type == "code")
    nbformat.write(notebook, path)
    return todo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args()
    for path in args.notebooks:
        print(f"{path}: filled cells {fill(path.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
