"""``make check CHAPTER=N`` grades only a chapter that exists, and only on a GPU (issue 57).

An unknown chapter used to leave the Makefile's wildcard empty, so pytest ran the whole suite for
minutes; without a GPU every check was skipped and the run "passed", having graded nothing. The
Makefile runs here as a learner types it, with this interpreter as the venv's Python (``PY``) and
the install step taken as done (``-o``: an out-of-date stamp must not reinstall the venv).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
LISTED = " ".join(str(int(p.name[:2])) for p in NOTEBOOKS)

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make_check(chapter: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU, even on a machine with one
    return subprocess.run(["make", "-s", "-o", ".venv/.installed", f"PY={sys.executable}",
                           "check", f"CHAPTER={chapter}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("chapter", ["12", "03", "three", "", "0"])
def test_an_unknown_chapter_is_refused_in_one_line(chapter):
    done = make_check(chapter)
    assert done.returncode != 0
    assert done.stdout.splitlines() == [
        f"make check: no chapter {chapter!r}; CHAPTER is one of {LISTED} (make check CHAPTER=3)"]
    assert "passed" not in done.stdout + done.stderr  # pytest never started


def test_without_a_gpu_nothing_is_graded():
    done = make_check("3")
    assert done.returncode != 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("make check: grading runs the exercises' checks on a CUDA GPU, "
                                "and this machine has none"), lines
    # the chapter's exercise files are listed first, attempted or not
    assert lines[:-1] and all(line.split()[-1].startswith("kernels/exercises/ch3_")
                              for line in lines[:-1]), lines
    assert "passed" not in done.stdout + done.stderr


def test_the_chapters_are_found():
    assert LISTED.startswith("1 2 3 4 5 6 7 8 9"), LISTED
