"""Helpers for the chapters' notebooks: the setup cell, and showing a kernel's source or the
change from one version to the next."""

from __future__ import annotations

from ..build.build_cache import KERNELS_DIR, source_path

# The first cell of every notebook (tests/test_notebooks.py checks it is exactly this, with the
# repository URL of _config.yml, tagged remove-cell: the book leaves it out, Jupyter and Colab
# keep it). It makes `kernels` importable inside the repository and on Colab, where it first
# clones the repository and then checks the runtime (kernels/course/colab.py); elsewhere it
# changes nothing.
SETUP_CELL = '''\
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "{repository}"
COLAB = "google.colab" in sys.modules
if COLAB and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
ROOT = next((p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
             if os.path.isfile(os.path.join(p, "kernels", "__init__.py"))), None)
if ROOT is None:  # a notebook opened outside the repository, or copied out of it
    raise FileNotFoundError("the course's repository is not here: clone " + REPOSITORY
                            + " and open this notebook from the clone's chapters/ or"
                            " solutions/ folder")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if COLAB:  # a GPU runtime, ninja, an nvcc that PyTorch accepts; where your files are
    from kernels.course.colab import prepare_colab
    prepare_colab(ROOT)'''
SETUP_TAG = "remove-cell"


# Listings longer than this are folded: the file's name and length show, the code opens on a
# click. The lines the prose discusses are shown whole with start/end, next to the prose.
FOLD_LINES = 60


def show_source(source, start: str | None = None, end: str | None = None,
                fold: bool | None = None):
    """Display a kernel file (or the lines from the one containing ``start`` to ``end``), highlighted.

    Notebooks never keep a copy of a kernel: they show the file they are about to build. A
    listing is folded (an HTML <details>, which Jupyter, Colab and the book all render) when
    ``fold`` is True, or by default when it has more than FOLD_LINES lines. The solutions pass
    False: their listings are inside the answer's dropdown already.
    """
    from IPython.display import Markdown

    path = source_path(source)
    lines = path.read_text().splitlines()
    if start is not None:
        first = next(i for i, line in enumerate(lines) if start in line)
        last = next((i for i, line in enumerate(lines[first + 1:], first + 1)
                     if end is not None and end in line), len(lines) - 1)
        lines = lines[first:last + 1]
    shown = path.relative_to(KERNELS_DIR.parent).as_posix()
    language = {".cu": "cuda", ".cuh": "cuda", ".py": "python"}.get(path.suffix, "cpp")
    code = f"```{language}\n" + "\n".join(lines) + "\n```"
    if not (fold or (fold is None and len(lines) > FOLD_LINES)):
        return Markdown(f"`{shown}`\n\n{code}")
    what = "lines" if start is None else "lines shown"
    return Markdown(f'<details class="listing"><summary>{shown} ({len(lines)} {what}: click to '
                    f"open)</summary>\n\n{code}\n\n</details>")


def show_diff(old, new, context: int = 3):
    """Display what changed from kernel file ``old`` to ``new`` as a unified diff, highlighted,
    with the whole of ``new`` in a fold below it.

    A version of a kernel is one change to the one before; the diff is that change, the lines a
    learner reads, and the fold is the file the next cell builds. Lines starting with ``-`` are
    the old version's, ``+`` the new one's; the others are context.
    """
    import difflib

    from IPython.display import Markdown

    before, after = source_path(old), source_path(new)
    names = [path.relative_to(KERNELS_DIR.parent).as_posix() for path in (before, after)]
    diff = difflib.unified_diff(before.read_text().splitlines(), after.read_text().splitlines(),
                                fromfile=names[0], tofile=names[1], n=context, lineterm="")
    lines = list(diff)
    changed = sum(line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
                  for line in lines)
    return Markdown(f"`{names[1]}` against `{names[0]}` ({changed} lines changed)\n\n```diff\n"
                    + "\n".join(lines) + "\n```\n\n" + show_source(new, fold=True).data)


def kernels_launched(fn, pattern: str = r"\w+") -> list[str]:
    """The names (matching ``pattern``) of the CUDA kernels one call of ``fn()`` launches.

    Read from the profiler's trace, so it says what ran, not what a dispatch rule predicts.
    """
    import re

    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    found = (re.search(r"\b(" + pattern + r")\b", e.name) for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA)
    return sorted({m.group(1) for m in found if m})
