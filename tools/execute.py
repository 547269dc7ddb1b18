"""Execute notebooks in place on a GPU machine and record what produced their outputs.

    python tools/execute.py chapters/02_atomics.ipynb [more.ipynb ...]

Each notebook runs top to bottom in its own folder (as Jupyter and nbval run it). Its metadata
then gets ``course.environment`` (GPU, driver, torch, CUDA, nvcc, date), ``course.sources``
(the SHA-256 of every kernel source the notebook built, logged by ``kernels.load``: see
kernels/build/provenance.py) and ``course.seconds`` (how long it ran: tools/stale.py plans the next
GPU run with it).
``tests/test_notebooks.py`` fails when a stored notebook's sources no longer match the files,
and ``tools/status.py`` turns the environments into the book's status page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def logged_sources(log: Path) -> dict:
    sources = {}
    if log.exists():
        for line in log.read_text().splitlines():
            sources.update(json.loads(line))
    return dict(sorted(sources.items()))


def execute(path: Path, timeout: int) -> float:
    import nbformat
    from nbclient import NotebookClient

    from kernels.measure.envinfo import environment

    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "sources.jsonl"
        os.environ["KERNELS_SOURCES_LOG"] = str(log)
        started = time.perf_counter()
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        finally:
            os.environ.pop("KERNELS_SOURCES_LOG", None)
        seconds = time.perf_counter() - started
        notebook.metadata["course"] = {"environment": environment(),
                                       "sources": logged_sources(log),
                                       "seconds": round(seconds)}
    nbformat.write(notebook, path)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args()
    failed = []
    for path in args.notebooks:
        try:
            print(f"{path}: executed in {execute(path, args.timeout):.0f} s", flush=True)
        except Exception as error:  # report every notebook, then fail
            failed.append(path)
            print(f"{path}: FAILED\n{str(error)[-3000:]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
