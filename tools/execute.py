"""Execute notebooks in place on a GPU machine and record what produced their outputs.

    python tools/execute.py chapters/02_atomics.ipynb [more.ipynb ...]

Each notebook runs top to bottom in its own folder (as Jupyter and nbval run it). Its metadata
then gets ``course.environment`` (GPU, driver, torch, CUDA, nvcc, date, the host's µs per small
PyTorch call), ``course.sources`` (the SHA-256 of every kernel source the notebook built and of
every operator of ``kernels/ops`` it imported, logged by ``kernels.load``: see
kernels/build/provenance.py) and ``course.seconds``
(how long it ran: tools/stale.py plans the next GPU run with it).
``tests/test_notebooks.py`` fails when a stored notebook's sources no longer match the files,
and ``tools/status.py`` turns the environments into the book's status page.

The small-GPU run (``tools/gpu_run.sh smallgpu``) executes copies instead, as a learner's GPU
would run them, and keeps the stored outputs as they are:

    KERNELS_ARCHS=7.5+PTX python tools/execute.py --out /tmp/small --memory-gib 15 \
        --summary book/results/small_gpu_run.csv chapters/*.ipynb

``--memory-gib`` caps the notebook's process with ``torch.cuda.set_per_process_memory_fraction``
(an IPython start-up file, run before the first cell); processes the notebook starts (chapter
8's ranks, chapter 9's isolated evaluations) are not capped, but size their work by what the
capped notebook measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


MEMORY_CAP = """import torch
_total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, {gib} * 2**30 / _total))
del _total
"""


def cap_memory(ipython_dir: Path, gib: float) -> None:
    """An IPython profile in ``ipython_dir`` whose start-up file caps the GPU memory at ``gib``."""
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-memory-cap.py").write_text(MEMORY_CAP.format(gib=gib))


def execute(path: Path, timeout: int, out: Path | None = None,
            memory_gib: float | None = None) -> float:
    """Run ``path`` top to bottom and write it, with its provenance, in place or under ``out``
    (there also when a cell fails, to show where)."""
    import nbformat
    from nbclient import NotebookClient

    from kernels.measure.envinfo import environment, host_op_us

    notebook = nbformat.read(path, as_version=4)
    target = out / path if out else path
    # The host's speed before the run: just after it, the notebook's kernel is still shutting
    # down and the host reads about 1.6x slower than it is.
    host = host_op_us()
    saved = {k: os.environ.get(k) for k in ("KERNELS_SOURCES_LOG", "IPYTHONDIR")}
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "sources.jsonl"
        os.environ["KERNELS_SOURCES_LOG"] = str(log)
        if memory_gib:
            cap_memory(Path(scratch) / "ipython", memory_gib)
            os.environ["IPYTHONDIR"] = str(Path(scratch) / "ipython")
        started = time.perf_counter()
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}},
                                **progress_hooks(path))
        try:
            client.execute()
        except Exception:
            if out:
                target.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(notebook, target)
            raise
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        seconds = time.perf_counter() - started
        notebook.metadata["course"] = {"environment": {**environment(), "host_us_per_op": host},
                                       "sources": logged_sources(log),
                                       "seconds": round(seconds)}
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return seconds


SLOW_CELL_S = 10


def progress_hooks(path: Path) -> dict:
    """nbclient hooks that print each cell slower than SLOW_CELL_S seconds as it finishes: a
    notebook that outgrows a device call's time limit then shows which cells grew."""
    started = {}

    def start(cell, cell_index):
        started[cell_index] = time.perf_counter()

    def executed(cell, cell_index, execute_reply):
        seconds = time.perf_counter() - started.pop(cell_index, time.perf_counter())
        if seconds > SLOW_CELL_S:
            first = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""
            print(f"  {path.name} cell {cell_index}: {seconds:.0f} s  {first}", flush=True)

    return {"on_cell_start": start, "on_cell_executed": executed}


ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def failure(error: Exception) -> str:
    """"FAILED: <exception>: <message>" on one line, without the traceback's colours: a cell's
    error (nbclient's CellExecutionError names them), or the error itself."""
    name, value = getattr(error, "ename", ""), getattr(error, "evalue", "")
    text = f"{name}: {value}" if name else str(error)
    return "FAILED: " + " ".join(ANSI_COLOUR.sub("", text).split())[:300]


def summary_rows(outcomes, memory_gib) -> list[dict]:
    """One row per notebook of a run: how long it took, and ok or the end of its error."""
    from kernels.measure.envinfo import environment

    env = environment()
    return [{"notebook": str(path), "outcome": outcome, "seconds": round(seconds),
             "gpu": env.get("gpu", ""), "archs": os.environ.get("KERNELS_ARCHS", "the GPU's"),
             "memory_cap_gib": memory_gib or "", "date": env.get("date", "")}
            for path, outcome, seconds in outcomes]


def write_summary(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` to the CSV at ``path``, keeping its rows of other notebooks: a run split
    over several calls adds up to one table."""
    import csv

    ran = {row["notebook"] for row in rows}
    kept = list(csv.DictReader(open(path))) if path.exists() else []
    rows = [row for row in kept if row["notebook"] not in ran] + rows
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[-1]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--out", type=Path, help="write the executed notebooks under this folder")
    parser.add_argument("--memory-gib", type=float, help="cap each notebook's GPU memory")
    parser.add_argument("--summary", type=Path, help="CSV of each notebook's time and outcome")
    args = parser.parse_args()
    outcomes = []
    for path in args.notebooks:
        started = time.perf_counter()
        try:
            seconds = execute(path, args.timeout, args.out, args.memory_gib)
            outcomes.append((path, "ok", seconds))
            print(f"{path}: executed in {seconds:.0f} s", flush=True)
        except Exception as error:  # report every notebook, then fail
            outcomes.append((path, failure(error), time.perf_counter() - started))
            print(f"{path}: FAILED\n{str(error)[-3000:]}", flush=True)
    if args.summary:
        write_summary(args.summary, summary_rows(outcomes, args.memory_gib))
    return 1 if any(outcome != "ok" for _, outcome, _ in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
