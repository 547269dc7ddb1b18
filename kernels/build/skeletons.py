"""The exercises' skeletons as the course ships them, and whether a learner has edited one.

``kernels/exercises/`` holds the files a learner edits: every ``.cu`` there, and the Python files
that are exercises themselves (``ch8_one_collective.py``, ``ch9_model_new.py``; the ``chN_checks.py``
are the course's checks, not exercises). ``kernels/exercises/skeletons.json`` records the SHA-256
of each as shipped (``python -m kernels.build.skeletons --write`` after changing a skeleton), so
that a learner's work changes nothing the course checks about itself:

- a notebook's provenance compares an exercise file with the skeleton as shipped, never with the
  learner's edit (:func:`kernels.build.provenance.changed_sources`);
- the listings test and the compile test look at an exercise file only while it is the skeleton;
- ``Chapter.exercise`` tells an untouched skeleton (not attempted: the cell prints the
  skeleton's verdict, as the course's own run stored it) from an attempt, which must pass: a
  failing attempt raises, so that ``pytest --nbval`` fails with the exercise's verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from .build_cache import KERNELS_DIR, source_path

EXERCISES = KERNELS_DIR / "exercises"
MANIFEST = EXERCISES / "skeletons.json"
NOT_EXERCISES = {"__init__.py"}  # and every *_checks.py


def learner_files() -> list[Path]:
    """The files of kernels/exercises/ that a learner edits, sorted."""
    return sorted(p for p in EXERCISES.iterdir()
                  if p.suffix in (".cu", ".py") and p.name not in NOT_EXERCISES
                  and not p.stem.endswith("_checks"))


def key(path: Path) -> str:
    """A file's name in the manifest: its path from the repository's root."""
    return Path(path).resolve().relative_to(KERNELS_DIR.parent).as_posix()


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def shipped() -> dict[str, str]:
    """{path from the repository's root: SHA-256 of the skeleton as the course ships it}."""
    return json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}


def attempted(source) -> bool:
    """Whether ``source`` (a path, or a name relative to ``kernels/`` as ``load`` takes it) is an
    exercise file that differs from its skeleton as shipped."""
    try:
        path = source_path(source)
        expected = shipped().get(key(path))
    except (FileNotFoundError, ValueError):  # no such file, or outside the repository
        return False
    return expected is not None and digest(path) != expected


def write() -> dict[str, str]:
    """Record the skeletons as they are now (run after changing one, never after doing one)."""
    table = {key(p): digest(p) for p in learner_files()}
    MANIFEST.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


def chapters() -> dict[int, Path]:
    """{chapter number: its notebook}, from chapters/NN_name.ipynb."""
    found = sorted((KERNELS_DIR.parent / "chapters").glob("[0-9][0-9]_*.ipynb"))
    return {int(p.name[:2]): p for p in found}


def grade_ready(chapter: str) -> int:
    """``make check``'s gate: 0 where ``chapter`` names a chapter and a GPU is here, else one line
    and 2. Without it, an unknown chapter made the Makefile run the whole suite, and a machine
    without a GPU skipped every check and reported success, having graded nothing."""
    known = chapters()
    if not chapter.isdigit() or chapter != str(int(chapter)) or int(chapter) not in known:
        print(f"make check: no chapter {chapter!r}; CHAPTER is one of "
              f"{' '.join(map(str, known))} (make check CHAPTER=3)")
        return 2
    for path in learner_files():
        if path.name.startswith(f"ch{chapter}_"):
            print(f"{'attempted' if attempted(path) else 'not attempted':<14} {key(path)}")
    import torch

    if not torch.cuda.is_available():
        print("make check: grading runs the exercises' checks on a CUDA GPU, and this machine has "
              "none; nothing was graded (run it on a GPU machine or on Colab)")
        return 2
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="record the skeletons as they are now in skeletons.json")
    parser.add_argument("--chapter", type=int, help="list only this chapter's exercise files")
    parser.add_argument("--grade", metavar="CHAPTER",
                        help="make check's gate: the chapter exists and a GPU is here")
    args = parser.parse_args()
    if args.grade is not None:
        return grade_ready(args.grade)
    if args.write:
        print(f"wrote {MANIFEST.relative_to(KERNELS_DIR.parent)}: {len(write())} skeletons")
    for path in learner_files():
        if args.chapter is None or path.name.startswith(f"ch{args.chapter}_"):
            print(f"{'attempted' if attempted(path) else 'not attempted':<14} {key(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
