"""A notebook's prose beside the outputs it speaks of, for reading each claim against its data.

    python tools/claims.py chapters/04_two_pass.ipynb         # every cell
    python tools/claims.py chapters/04_two_pass.ipynb 40 62   # cells 40 to 61

After a notebook is executed again its numbers move, and a sentence written for the last run
("level", "a fifth faster", "ahead at every size") can stop being true. This prints the
notebook's cells in order, each with its index: a markdown cell whole, a code cell's first line
and its outputs (text, a Markdown table, a printed line), each output cut at ``--width``
characters. Read each result sentence against the outputs around it, and the CSV in
``book/results/`` that a cell renders; ``tests/test_prose_numbers.py`` keeps numbers with units
out of the prose, so what is left to check is the words.
"""

from __future__ import annotations

import argparse
import sys

import nbformat

OUTPUT_KINDS = ("text/markdown", "text/plain")  # what a table or a printed value shows


def output_text(output) -> str:
    """What an output shows as text: a stream's text, else its Markdown or plain form ('' for a
    figure alone)."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return next((data[kind] for kind in OUTPUT_KINDS if kind in data), "")


def cell_lines(index: int, cell, width: int) -> list[str]:
    """One cell: a markdown cell whole; a code cell's first line, then each output, cut."""
    if cell.cell_type == "markdown":
        return [f"--- [{index}] markdown", cell.source]
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    lines = [f"--- [{index}] code: {first}"]
    for output in cell.get("outputs", []):
        text = output_text(output).rstrip()
        if text:
            cut = text if len(text) <= width else text[:width] + f" ... ({len(text)} characters)"
            lines.append(">>> " + cut)
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("first", nargs="?", type=int, default=0)
    parser.add_argument("stop", nargs="?", type=int, default=None)
    parser.add_argument("--width", type=int, default=4000, help="characters kept per output")
    opts = parser.parse_args(argv)
    cells = nbformat.read(opts.notebook, as_version=4).cells
    for index in range(opts.first, len(cells) if opts.stop is None else opts.stop):
        print("\n".join(cell_lines(index, cells[index], opts.width)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
