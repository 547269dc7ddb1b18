"""Every image a chapter or a book page shows exists and has alt text; tools/diagrams.py draws
the committed concept diagrams byte for byte (CPU only: matplotlib)."""
import filecmp
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"```\{(?:figure|image)\}\s+(\S+)\n((?::[\w-]+:.*\n)*)")
MARKDOWN_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)")


def markdown_sources():
    """(name, folder the paths are relative to, markdown text) for every page of the book."""
    for path in sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        yield path.name, path.parent, text
    for path in sorted((ROOT / "book").glob("*.md")) + [ROOT / "README.md"]:
        yield path.name, path.parent, path.read_text()


def images():
    found = []
    for name, folder, text in markdown_sources():
        for target, options in FIGURE.findall(text + "\n"):
            alt = re.search(r"^:alt:\s*(.*)$", options, re.M)
            found.append((name, folder / target, alt.group(1).strip() if alt else ""))
        for alt, target in MARKDOWN_IMAGE.findall(text):
            if not target.startswith("http"):
                found.append((name, folder / target, alt.strip()))
    return found


def test_the_book_shows_the_diagrams():
    shown = {path.resolve().name for _, path, _ in images()}
    drawn = {p.name for p in (ROOT / "book" / "images").glob("*.svg")}
    assert not drawn - shown, f"drawn but shown nowhere: {drawn - shown}"
    assert len(shown & drawn) >= 12


@pytest.mark.parametrize("page,path,alt", images(), ids=lambda v: str(v)[-40:])
def test_image_exists_with_alt_text(page, path, alt):
    assert path.is_file(), f"{page} shows {path}, which does not exist"
    assert len(alt.split()) >= 8, f"{page}: {path.name} needs alt text that says what it shows"


def test_diagrams_are_what_the_script_draws(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "diagrams.py"), str(tmp_path)],
                   check=True, capture_output=True)
    drawn = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert len(drawn) >= 12
    differ = [name for name in drawn
              if not filecmp.cmp(tmp_path / name, ROOT / "book" / "images" / name, shallow=False)]
    assert not differ, f"rerun tools/diagrams.py and commit: {differ}"


def test_chapter_3_tree_matches_the_chapters_strided_rounds():
    sys.path.insert(0, str(ROOT / "tools"))
    import diagrams

    rounds = [(s, working, warps, ways) for s, _, working, warps, ways in diagrams.tree_rounds(2, 256)]
    assert rounds == list(diagrams.strided_rounds()(256, 32))
    assert [r[4] for r in diagrams.tree_rounds(3, 256)] == [1] * 8  # sequential: no conflict
    assert max(r[3] for r in rounds) == 8


# The book shows a figure at 100% of its content column, about 800 px wide at a 1280 px window:
# an SVG `width` pt wide draws a `size`-unit text at size * 800 / width px there.
COLUMN_PX, MIN_TEXT_PX = 800, 12


def smallest_text_px(svg: str) -> float:
    width = float(re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"', svg).group(1))
    sizes = [float(s) for s in re.findall(r"font-size: ?([\d.]+)px", svg)]
    return min(sizes) * COLUMN_PX / width


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "book" / "images").glob("ch*.svg")))
def test_diagram_text_is_readable_in_the_column(name):
    px = smallest_text_px((ROOT / "book" / "images" / name).read_text())
    assert px >= MIN_TEXT_PX, (f"{name}: its smallest text shows at {px:.1f} px in the book's "
                               f"column; draw it narrower (tools/diagrams.py WIDTH) or larger")


def test_the_readability_check_can_fail():
    wide = '<svg width="864pt" height="300pt"><text style="font-size: 8.5px">x</text></svg>'
    assert smallest_text_px(wide) < MIN_TEXT_PX  # the 12-inch figures this check replaced: 7.9 px
    assert smallest_text_px(wide.replace("864pt", "605pt").replace("8.5px", "9.5px")) >= 12
