"""The book's notebooks and table of contents, in one place for the tools, tests and GPU run.

    python -m kernels.course.book   # the notebooks, one path per line (tools/gpu_run.sh reads this)
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("chapters", "solutions")
TOC = ROOT / "_toc.yml"


def notebooks() -> list[Path]:
    """Every notebook of chapters/ and solutions/, chapters first, in name order."""
    return [p for d in NOTEBOOK_DIRS for p in sorted((ROOT / d).glob("*.ipynb"))]


def twins() -> list[Path]:
    """The py:percent twin of every notebook (what we edit; tools/sync_notebooks.py)."""
    return [p for d in NOTEBOOK_DIRS for p in sorted((ROOT / d).glob("*.py"))]


def toc_files(toc: dict | None = None) -> list[str]:
    """Every ``file:`` entry of the jb-book _toc.yml (paths without extension), the root first."""
    if toc is None:
        import yaml

        toc = yaml.safe_load(TOC.read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def toc_notebooks() -> list[str]:
    """The entries of the table of contents that are notebooks (paths without extension)."""
    return [f for f in toc_files() if (ROOT / f"{f}.ipynb").is_file()]


if __name__ == "__main__":
    print("\n".join(p.relative_to(ROOT).as_posix() for p in notebooks()))
