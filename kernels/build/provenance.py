"""Which kernel sources a notebook built, and which of the course's Python operators
(``kernels/ops``) and timing modules it imported, for its metadata: one SHA-256 per file.

tools/execute.py sets $KERNELS_SOURCES_LOG while it runs a notebook, and stores what ``load``
logged there as the notebook's ``metadata.course.sources``. :func:`changed_sources` compares them
with the files, and :func:`cells_not_run` finds cells whose code changed: tests/test_notebooks.py
fails on a notebook whose outputs are older than its kernels or its code, and tools/stale.py
lists those notebooks for the next GPU run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from .build_cache import KERNELS_DIR, Sources
from .skeletons import digest, shipped


# The timing: how every time in a notebook's tables and plots is taken (the L2 clear, the lead
# before each call, the medians, the kernels' spans).
TIMING_MODULES = ("kernels.measure.events", "kernels.measure.spans", "kernels.measure.bench")


def imported_code() -> list[Path]:
    """The files of ``kernels/ops`` and of the timing this process has imported: the Python
    around the kernels (arguments, chunks, autograd) and the Python that times them, which shape
    a notebook's outputs as much as a kernel does."""
    return sorted({Path(module.__file__).resolve() for module in list(sys.modules.values())
                   if (getattr(module, "__name__", "").split(".")[:2] == ["kernels", "ops"]
                       or getattr(module, "__name__", "") in TIMING_MODULES)
                   and getattr(module, "__file__", None)})


def record(sources: Sources) -> None:
    """Append the hashes of the sources just built, and of the operators and timing modules
    imported so far (an operator builds its kernels on first use, after its import), to
    $KERNELS_SOURCES_LOG, if it is set."""
    log = os.environ.get("KERNELS_SOURCES_LOG")
    if not log:
        return
    root = KERNELS_DIR.parent
    with open(log, "a") as handle:
        for file, text in sources.files().items():
            rel = file.relative_to(root).as_posix()
            handle.write(json.dumps({rel: hashlib.sha256(text.encode()).hexdigest()}) + "\n")
        for file in imported_code():
            handle.write(json.dumps({file.relative_to(root).as_posix(): digest(file)}) + "\n")


def changed_sources(course: dict) -> list[str]:
    """What changed since a notebook was executed, from its ``metadata.course``: one line per
    kernel source or operator that no longer exists or no longer has the hash it had then. An
    exercise file is compared as the course ships it (``skeletons.json``): a learner's edit is
    not a change of the course's sources."""
    root = KERNELS_DIR.parent
    skeletons = shipped()
    changed = []
    for file, recorded in sorted(course.get("sources", {}).items()):
        source = root / file
        if file in skeletons:
            if skeletons[file] != recorded:
                changed.append(f"{file}'s skeleton changed since the notebook was executed")
        elif not source.is_file():
            changed.append(f"{file} no longer exists")
        elif digest(source) != recorded:
            changed.append(f"{file} changed since the notebook was executed")
    return changed


def cells_not_run(notebook) -> list[int]:
    """The code cells of a notebook that have no execution count: in an executed notebook, the
    cells whose code changed since (tools/sync_notebooks.py empties their outputs)."""
    return [i for i, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and cell.get("execution_count") is None
            and not _setup_cell_without_output(i, cell)]


def _setup_cell_without_output(index: int, cell) -> bool:
    """The first cell, tagged remove-cell, is the setup cell (kernels.course.notebook.SETUP_CELL;
    tests/test_notebooks.py checks it is exactly that). Outside Colab it prints nothing and the
    book leaves it out, so a change of its code changes no output a reader sees: it does not make
    the notebook stale, as long as it stored no output (issue 57 changed its message for a
    missing repository in all 18 notebooks)."""
    return index == 0 and "remove-cell" in cell.metadata.get("tags", []) and not cell.outputs
