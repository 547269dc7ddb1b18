"""Which kernel sources a notebook built, for its metadata: one SHA-256 per file, per build.

tools/execute.py sets $KERNELS_SOURCES_LOG while it runs a notebook, and stores what ``load``
logged there as the notebook's ``metadata.course.sources``; tests/test_notebooks.py compares them
with the files to find notebooks whose outputs are older than their kernels.
"""

from __future__ import annotations

import hashlib
import json
import os

from .build_cache import KERNELS_DIR, Sources


def record(sources: Sources) -> None:
    """Append the hashes of the sources just built to $KERNELS_SOURCES_LOG, if it is set."""
    log = os.environ.get("KERNELS_SOURCES_LOG")
    if not log:
        return
    texts = {sources.path: sources.file_text, sources.binding: sources.binding_text,
             **sources.headers, **sources.spliced, **sources.extra_bindings}
    with open(log, "a") as handle:
        for file, text in texts.items():
            rel = file.relative_to(KERNELS_DIR.parent).as_posix()
            handle.write(json.dumps({rel: hashlib.sha256(text.encode()).hexdigest()}) + "\n")
