"""Number the exercises per chapter: Exercise 3.1, 3.2, ... rather than 6, 7, ... across the book.

Sphinx numbers sphinx-exercise's exercises, like figures, through the whole book, unless the
table of contents is numbered (which would number every heading as well). After Sphinx has
assigned its numbers, each exercise of chapters/NN_name gets (NN, k), k its place in the page.
Everything reads these numbers: the exercise's title, a {ref} to it, and the title of its
solution ("Solution to Exercise 3.1") in the solutions notebook.
"""

import re

# chapters/03_block_reduction -> 3
CHAPTER = re.compile(r"^chapters/0*(\d+)_")


def _per_chapter(app, env):
    for docname, numbers in env.toc_fignumbers.items():
        chapter = CHAPTER.match(docname)
        exercises = numbers.get("exercise")
        if chapter and exercises:
            in_order = sorted(exercises, key=exercises.get)  # Sphinx's numbers follow the page
            numbers["exercise"] = {label: (int(chapter.group(1)), k)
                                   for k, label in enumerate(in_order, 1)}
    return []


def setup(app):
    # Late priority: after Sphinx's own numbering, which is connected to the same event.
    app.connect("env-get-updated", _per_chapter, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
