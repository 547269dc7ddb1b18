"""Each chapter's core path: what a learner must read in one sitting, held to budget (no GPU).

Issue 58's budgets for a chapter's core path (prose outside folds, tools/prose_stats.py) are
TARGET_WORDS words and TARGET_LONG_SHARE of sentences over 40 words, and no lab-notebook history
(PERFLOG, session numbers, "earlier runs"). Every chapter meets them: a chapter that grows past
them moves detail into a "Going deeper" fold, or cuts. The chapters' stated reading and run
times, and the welcome page's table of them, are checked against the same counts and
book/results/small_gpu_run.csv.
"""

import csv
import math
import re
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import prose_stats  # noqa: E402

TARGET_WORDS = 2500  # issue 58, item 2
TARGET_LONG_SHARE = 0.05  # issue 58, item 2: at most 5% of sentences over 40 words
TARGET_LAB_NOTEBOOK = 0


CHAPTERS = prose_stats.chapters()
by_chapter = pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)


@by_chapter
def test_core_path_is_within_budget(path):
    stats = prose_stats.stats(path)
    print(f"{path.stem}: {stats.words} words, {stats.long_share:.1%} of {stats.sentences} "
          f"sentences over {prose_stats.LONG_SENTENCE} words, {stats.lab_notebook} lab-notebook")
    assert stats.words <= TARGET_WORDS, \
        f"{path.stem}: {stats.words} core-path words, budget {TARGET_WORDS}: fold or cut"
    assert stats.long_share <= TARGET_LONG_SHARE + 1e-9, \
        f"{path.stem}: {stats.long_share:.1%} long sentences, budget {TARGET_LONG_SHARE:.0%}"
    assert stats.lab_notebook <= TARGET_LAB_NOTEBOOK, \
        f"{path.stem}: {stats.lab_notebook} lab-notebook mentions in the core path"


# ---- the counting rules themselves -----------------------------------------------------

def test_folds_code_and_display_math_are_not_core_path():
    md = ("Read this.\n\n```{admonition} Hint\n:class: dropdown\nhidden words\n```\n\n"
          "```{note}\nshown words\n```\n\n```python\nx = 1\n```\n\n$$a + b$$\n\n"
          ":::{dropdown} More\nalso hidden\n:::\n")
    core = prose_stats.core_path(md)
    assert "hidden" not in core and "x = 1" not in core and "a + b" not in core
    assert "Read this." in core and "shown words" in core and ":class:" not in core


def test_a_glossary_link_counts_as_the_words_it_shows():
    core = prose_stats.core_path("The {term}`warps <warp>` of a {term}`block` meet.")
    assert core == "The warps of a block meet."
    assert prose_stats.words(core) == 6


def test_every_exercise_opens_with_its_difficulty_and_time():
    """Issue 58: each exercise says its difficulty and time, first, in one form the counter knows."""
    unlabelled, checked = [], 0
    for path in CHAPTERS:
        for md in prose_stats.chapter_markdown(path):
            for body in re.findall(r"^```+\{exercise\}[^\n]*\n((?:\s*:[\w-]+:.*\n)*\s*\n)?(.*)",
                                   md, re.M):
                checked += 1
                if not prose_stats.EXERCISE_LABEL.match(body[1].strip()):
                    unlabelled.append(f"{path.stem}: {body[1][:60]}")
    assert not unlabelled, unlabelled
    assert checked >= 25, checked


@pytest.mark.parametrize("label", [
    "**Difficulty:** ★★☆ (moderate) · **Time:** about 30 minutes",
    "**Difficulty:** ★★★ (hard) · **Time:** about 60 minutes · **On paper:** no check, the "
    "answer is in the solutions"])
def test_an_exercise_label_is_not_prose(label):
    assert prose_stats.core_path(f"```{{exercise}}\n:label: x\n\n{label}\n\nDo it.\n```").split() \
        == ["Do", "it."]
    assert not prose_stats.EXERCISE_LABEL.match(label + " · **On paper:** no check")


def test_sentences_and_long_ones():
    text = "# A heading\n\nOne short sentence. " + "Word " + " ".join(["word"] * 40) + ".\n\n- an item"
    sents = prose_stats.sentences(text)
    assert len(sents) == 4
    assert sum(prose_stats.words(s) > prose_stats.LONG_SENTENCE for s in sents) == 1


def test_lab_notebook_mentions():
    found = prose_stats.LAB_NOTEBOOK.findall(
        "see bench/PERFLOG.md, session 31; earlier runs; a first version; in this run")
    assert len(found) == 5


# ---- the times a chapter states ---------------------------------------------------------

READING = re.compile(r"\*\*Reading time:\*\* about (\d+) minutes?")
RUN = re.compile(r"\*\*Run time:\*\* about (\d+) minutes?")


def small_gpu_minutes():
    with open(ROOT / "book" / "results" / "small_gpu_run.csv") as f:
        return {r["notebook"]: math.ceil(int(r["seconds"]) / 60) for r in csv.DictReader(f)}


def top_cell(path):
    return next(c.source for c in jupytext.read(path).cells if c.cell_type == "markdown")


@by_chapter
def test_stated_times_match_the_counts(path):
    top = top_cell(path)
    if path.stem == "08_multi_gpu" and not READING.search(top):
        pytest.skip("chapter 8's top cell has no 'Before you start' yet (issue 58)")
    reading, run = READING.search(top), RUN.search(top)
    assert reading and run, f"{path.stem}: the top cell states no reading or run time"
    computed = prose_stats.reading_minutes(prose_stats.stats(path).words)
    # An edit elsewhere in the chapter moves the count a little: a minute either way is fine.
    assert abs(int(reading.group(1)) - computed) <= 1, \
        f"{path.stem}: states {reading.group(1)} minutes of reading, the count gives {computed}"
    assert int(run.group(1)) == small_gpu_minutes()[f"chapters/{path.stem}.ipynb"]


def test_welcome_table_matches_the_chapters():
    intro = (ROOT / "book" / "intro.md").read_text()
    rows = re.findall(r"^\| \{doc\}`(\d) <\.\./chapters/([\w]+)>` \|[^|]*\| (\d+) min \| (\d+) min \|",
                      intro, re.M)
    assert [int(n) for n, *_ in rows] == list(range(1, 10)), "the welcome page's chapter table"
    runs = small_gpu_minutes()
    for _, stem, reading, run in rows:
        computed = prose_stats.reading_minutes(prose_stats.stats(ROOT / "chapters" / f"{stem}.py").words)
        assert abs(int(reading) - computed) <= 1, f"{stem}: the welcome page says {reading} min"
        assert int(run) == runs[f"chapters/{stem}.ipynb"], f"{stem}: run time on the welcome page"


# ---- the glossary's links ----------------------------------------------------------------

TERM = re.compile(r"\{term\}`(?:[^`<]*<([^>`]+)>|([^`]+))`")


def glossary_terms():
    text = (ROOT / "book" / "glossary.md").read_text()
    body = text[text.index("```{glossary}"):]
    return {line.strip().lower() for line in body.splitlines()[1:]
            if line.strip() and not line.startswith((" ", "`"))}


def test_every_term_link_has_an_entry():
    """What `jupyter-book build -n` reports, found without a build: a {term} without an entry."""
    terms = glossary_terms()
    assert {"warp", "sm", "occupancy", "bytes in flight", "little's law"} <= terms
    sources = [*ROOT.glob("book/*.md"), *ROOT.glob("chapters/*.py"), *ROOT.glob("solutions/*.py")]
    missing = sorted({f"{p.name}: {(a or b).strip()}" for p in sources
                      for a, b in TERM.findall(p.read_text())
                      if " ".join((a or b).split()).lower() not in terms})
    assert not missing, missing


def test_the_primer_is_short_and_says_its_reading_time():
    """Issue 58, item 1: the CUDA primer is at most about 1,500 words of prose, and the minutes
    it states are the count's (within one)."""
    text = (ROOT / "book" / "cuda_primer.md").read_text()
    words = prose_stats.words(prose_stats.core_path(text))
    assert words <= 1500, f"the primer has {words} words of prose (budget 1500)"
    stated = re.search(r"It takes about (\w+) minutes", text)
    numbers = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
    assert stated and abs(numbers[stated[1]] - prose_stats.reading_minutes(words)) <= 1, \
        f"the primer says {stated and stated[1]} minutes; its {words} words read in " \
        f"{prose_stats.reading_minutes(words)}"


@by_chapter
def test_the_learner_predicts_before_measuring_at_least_twice(path):
    """Issue 58, item 4: at least two "Predict" prompts in the core path, each answered
    by a folded "Answer" after the measurement it asks about."""
    markdown = prose_stats.chapter_markdown(path)
    core = "\n\n".join(prose_stats.core_path(md) for md in markdown)
    prompts = re.findall(r"\*\*Predict( first)?\.\*\*", core)
    answers = sum(len(re.findall(r"```\{admonition\} Answer[^\n]*\n:class: dropdown", md))
                  for md in markdown)
    assert len(prompts) >= 2, f"{path.stem}: {len(prompts)} Predict prompts"
    assert answers >= 2, f"{path.stem}: {answers} folded answers"


@by_chapter
def test_the_chapter_ends_with_a_summary_and_its_table(path):
    """Issue 58, item 3: a "Summary" section of at most five bullets, then a table generated
    from book/results (a code cell's Markdown output), before the exercises."""
    import nbformat

    cells = nbformat.read(path.with_suffix(".ipynb"), as_version=4).cells
    at = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"
               and re.search(r"^## Summary", c.source, re.M)), None)
    assert at is not None, f"{path.stem}: no Summary section"
    section = re.split(r"^## ", cells[at].source.split("## Summary", 1)[1], flags=re.M)[0]
    bullets = len(re.findall(r"^- ", section, re.M))
    assert 1 <= bullets <= 5, f"{path.stem}: the summary has {bullets} bullets"
    end = next(i for i, c in enumerate(cells) if i >= at and c.cell_type == "markdown"
               and re.search(r"^## Exercises", c.source, re.M))
    tables = [c for c in cells[at:end] if c.cell_type == "code" for o in c.get("outputs", [])
              if re.search(r"^\|[ :|-]*---", "".join(o.get("data", {}).get("text/markdown", "")),
                           re.M)]
    assert tables, f"{path.stem}: no generated table between the Summary and the Exercises"
