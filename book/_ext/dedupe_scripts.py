"""Drop repeated <script> tags from every HTML page.

With jupyter-book 1.0.4 on Sphinx 7.4, the inline scripts that sphinx-thebe and
sphinx-togglebutton add are emitted twice per page (once registered with filename None,
once with ""; Sphinx's de-duplication treats those as different). The repeated
`const THEBE_JS_URL = ...` is a JavaScript SyntaxError in every reader's console, which
tests/test_book.py (rightly) reports. This keeps the first copy of each script.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        attrs = getattr(script, "attributes", {}) or {}
        key = (getattr(script, "filename", None) or "", tuple(sorted(attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    if "script_files" in context:
        context["script_files"][:] = kept


def setup(app):
    # Late priority: run after the extensions that add page-specific scripts.
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
