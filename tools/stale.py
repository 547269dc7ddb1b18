"""The notebooks whose stored outputs are older than their kernels, and GPU calls to redo them.

    python tools/stale.py                 # the stale notebooks, why, and their last run time
    python tools/stale.py --limit 540     # also: NOTEBOOKS=... lines, each call under 540 s

A notebook is stale when a kernel source it built has changed since it was executed, or when a
code cell has no execution count because its code changed (tools/sync_notebooks.py empties it):
the two rules of tests/test_notebooks.py. Its last run time is
``metadata.course.seconds``, written by tools/execute.py; a notebook executed before that field
existed counts as ``--unknown`` seconds. The device runs at most 600 s per call, so the stale
notebooks are packed, longest first, into calls of ``tools/gpu_run.sh execute``, one set of
calls per GPU they last ran on: chapter 8 runs on two H200s, the others on the H100, and a call
runs on one machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def what_changed(notebook) -> list[str]:
    """Why an executed notebook must run again: its changed kernel sources, and its code cells
    left without outputs by a change of their code. Nothing for a notebook never executed."""
    from kernels.build.provenance import cells_not_run, changed_sources

    course = notebook.metadata.get("course")
    if not course:
        return []
    changed = changed_sources(course)
    if not_run := cells_not_run(notebook):
        changed.append(f"code cells {not_run} changed since the notebook was executed")
    return changed


def stale_notebooks() -> list[tuple[Path, list[str], dict]]:
    """(notebook, what changed, its ``metadata.course``) of every stale notebook."""
    import nbformat

    from kernels.course.book import notebooks

    found = []
    for path in notebooks():
        notebook = nbformat.read(path, as_version=4)
        if changed := what_changed(notebook):
            found.append((path, changed, notebook.metadata["course"]))
    return found


def pack(durations: dict, limit: float) -> list[list]:
    """Notebooks packed into calls of at most ``limit`` seconds, longest first (first fit).
    A notebook longer than the limit gets a call of its own."""
    calls = []
    for name, seconds in sorted(durations.items(), key=lambda item: -item[1]):
        for call in calls:
            if call[0] + seconds <= limit:
                call[0] += seconds
                call[1].append(name)
                break
        else:
            calls.append([seconds, [name]])
    return [names for _, names in calls]


def calls_by_gpu(stale, limit: float, unknown: float) -> dict[str, list[list]]:
    """GPU name -> the packed calls of the stale notebooks that last ran on it."""
    durations: dict[str, dict] = {}
    for path, _, course in stale:
        gpu = course.get("environment", {}).get("gpu", "an unknown GPU")
        name = path.relative_to(ROOT).as_posix()
        durations.setdefault(gpu, {})[name] = course.get("seconds") or unknown
    return {gpu: pack(times, limit) for gpu, times in durations.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, help="seconds per GPU call (print NOTEBOOKS lines)")
    parser.add_argument("--unknown", type=float, default=300,
                        help="seconds assumed for a notebook with no recorded run time")
    args = parser.parse_args()
    stale = stale_notebooks()
    if not stale:
        print("no stale notebook")
        return 0
    for path, changed, course in stale:
        seconds = course.get("seconds")
        took = f"{seconds} s" if seconds is not None else "time unknown"
        gpu = course.get("environment", {}).get("gpu", "an unknown GPU")
        print(f"{path.relative_to(ROOT)} (last run {took} on {gpu}):")
        for line in changed:
            print(f"    {line}")
    if args.limit:
        for gpu, calls in calls_by_gpu(stale, args.limit, args.unknown).items():
            print(f"\n# last run on {gpu}:")
            for names in calls:
                print(f'NOTEBOOKS="{" ".join(names)}" tools/gpu_run.sh execute')
    return 0


if __name__ == "__main__":
    sys.exit(main())
