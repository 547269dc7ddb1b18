"""What a learner must read in each chapter: its core-path prose words and its long sentences.

    python tools/prose_stats.py        # a table: chapter, words, sentences over 40 words, ...

The core path is a chapter's markdown outside folds: every markdown cell of its twin
(chapters/NN_*.py, read with jupytext), less what a reader only sees on a click (a MyST
``{dropdown}``, or a directive with ``:class: dropdown``), less code blocks and display math
(read, but not prose). Inline code and inline math count as one word each, as a reader reads
them. A sentence ends at ``.``, ``?`` or ``!`` before a space, and a heading, a list item or a
table row is a sentence of its own. Lab-notebook mentions are the course's own history in the
core path (issue 58: "PERFLOG", session numbers, "earlier runs", "a first version", "this
run"), which the core path should not narrate.

tests/test_prose_budget.py holds these values as ceilings that can only go down, and checks
each chapter's stated reading time against them (:func:`reading_minutes`).
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 200  # a careful reader of technical prose
LONG_SENTENCE = 40  # words

FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}|:{3,})(.*)$")
LAB_NOTEBOOK = re.compile(
    r"PERFLOG|\bsession \d+|\bearlier runs?\b|\ba first version\b|\bthis run\b", re.I)
WORD = re.compile(r"[\w$`'’.,%/+\-–×]+")
# A glossary link reads as its shown text: {term}`warps <warp>` is the one word "warps".
# An exercise's first line, its difficulty and time: a label, like a directive's options.
EXERCISE_LABEL = re.compile(  # an exercise answered on paper says so, with no check to run
    r"^\*\*Difficulty:\*\* (★☆☆ \(easy\)|★★☆ \(moderate\)|★★★ \(hard\)) · "
    r"\*\*Time:\*\* about \d+ minutes( · \*\*On paper:\*\* no check, the answer is in the "
    r"solutions)?$")
TERM_ROLE = re.compile(r"\{term\}`([^`<]*?)\s*(?:<[^>`]*>)?`")


def _folded(info: str, options: list[str]) -> bool:
    return info.startswith("{dropdown}") or any(
        o.strip().startswith(":class:") and "dropdown" in o for o in options)


def core_path(markdown: str) -> str:
    """The markdown a reader sees without opening a fold: folds, code blocks and display math
    removed, directive option lines (``:class: note``) and exercises' difficulty labels dropped,
    a ``{term}`` link read as the text it shows."""
    lines = markdown.splitlines()
    kept: list[str] = []
    stack: list[tuple[str, bool, bool]] = []  # open fences: (marker, hidden, a code block)
    i = 0
    while i < len(lines):
        line, match = lines[i], FENCE.match(lines[i])
        i += 1
        hidden = any(h for _, h, _ in stack)
        in_code = bool(stack) and stack[-1][2]
        if match:
            marker, info = match.group(1), match.group(2).strip()
            if stack and not info and marker[0] == stack[-1][0][0] \
                    and len(marker) >= len(stack[-1][0]):
                stack.pop()  # the open block's closing fence
                continue
            if not in_code:
                if info.startswith("{"):  # a MyST directive: its body is prose unless folded
                    options = []
                    while i < len(lines) and re.match(r"\s*:\w[\w-]*:", lines[i]):
                        options.append(lines[i])
                        i += 1
                    stack.append((marker, hidden or _folded(info, options), False))
                else:
                    stack.append((marker, True, True))  # a code block: not prose
                continue
        if not hidden and not EXERCISE_LABEL.match(line.strip()):
            kept.append(line)
    text = TERM_ROLE.sub(r"\1", "\n".join(kept))
    return re.sub(r"\$\$.+?\$\$", " ", text, flags=re.S)


def sentences(text: str) -> list[str]:
    """Headings, list items and table rows alone; prose paragraphs split after . ? !"""
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+] |\d+\. |#|\|))", text):
        block = " ".join(block.split())
        if not block:
            continue
        out += [s for s in re.split(r"(?<=[.?!])\s+(?=[A-Z(`*\[{$])", block) if s.strip()]
    return out


def words(text: str) -> int:
    return len(WORD.findall(text))


@dataclass
class Stats:
    chapter: str
    words: int
    sentences: int
    long: int
    lab_notebook: int

    @property
    def long_share(self) -> float:
        return self.long / self.sentences if self.sentences else 0.0


def chapter_markdown(path: Path) -> list[str]:
    import jupytext

    return [c.source for c in jupytext.read(path).cells if c.cell_type == "markdown"]


def stats(path: Path) -> Stats:
    core = "\n\n".join(core_path(md) for md in chapter_markdown(path))
    sents = sentences(core)
    return Stats(path.stem, words(core), len(sents),
                 sum(words(s) > LONG_SENTENCE for s in sents), len(LAB_NOTEBOOK.findall(core)))


def reading_minutes(n_words: int) -> int:
    return math.ceil(n_words / WORDS_PER_MINUTE)


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))


def main() -> None:
    print(f"{'chapter':28} {'words':>6} {'read min':>8} {'sentences':>9} {'>40 words':>9} "
          f"{'share':>6} {'lab-notebook':>12}")
    for path in chapters():
        s = stats(path)
        print(f"{s.chapter:28} {s.words:6d} {reading_minutes(s.words):8d} {s.sentences:9d} "
              f"{s.long:9d} {s.long_share:6.1%} {s.lab_notebook:12d}")


if __name__ == "__main__":
    sys.exit(main())
