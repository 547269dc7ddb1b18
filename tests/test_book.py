"""Build the book as `make book` does, then read every page in headless Chromium.

The build runs once per session (`jupyter-book build . -W -n --keep-going --all`, in
place into _build/html). The browser part serves _build/html on 127.0.0.1 and visits
each page once at 1280 x 900 px, recording console errors, failed or off-site requests,
images, links, whether MathJax rendered and what content is cut off; the tests below
assert on those records. A screenshot of every whole page goes to _build/screenshots/
(git-ignored) for a reviewer to look at.

Chromium is Debian's /usr/bin/chromium (CI installs it: .ci/run), driven by the
playwright package with `executable_path`; `playwright install` is never needed.
"""

import functools
import http.server
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from kernels.course.book import toc_notebooks

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHROMIUM = Path("/usr/bin/chromium")
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"].get("branch", "main")

SCREENSHOTS = ROOT / "_build" / "screenshots"
VIEWPORT = {"width": 1280, "height": 900}  # a laptop: the width every page must fit

# Blocks whose content is wider than their box and that no ancestor lets the reader scroll to
# (an ancestor with overflow-x auto/scroll): text cut off, or spilling out of the column.
# Inline math is left out (MathJax's boxes overhang by a pixel or two by design).
CLIPPED_JS = """() => {
  const article = document.querySelector('article') || document.body;
  const clipped = [];
  const blocks = 'table, pre, div.cell_output, div.output, div.highlight, div.math, ' +
                 'mjx-container[display="true"], details';
  for (const el of article.querySelectorAll(blocks)) {
    if (el.scrollWidth <= el.clientWidth + 1) continue;
    let node = el, scrolls = false;
    while (node && node !== article.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if (overflow === 'auto' || overflow === 'scroll') { scrolls = true; break; }
      if (overflow === 'hidden' || overflow === 'clip') break;
      node = node.parentElement;
    }
    if (!scrolls) clipped.push(`${el.tagName.toLowerCase()} ${el.scrollWidth} px in ` +
                               `${el.clientWidth}: ${(el.innerText || '').slice(0, 60)}`);
  }
  // A table must fit the column whole: its last columns are often its point (the status and
  // reliability pages), and a table's scrollbar sits below its last row, out of sight.
  for (const table of article.querySelectorAll('table')) {
    const box = table.parentElement;
    if (box.scrollWidth > box.clientWidth + 1)
      clipped.push(`a table needs a sideways scroll (${box.scrollWidth} px in ${box.clientWidth}): ` +
                   (table.innerText || '').slice(0, 60));
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1)
    clipped.push(`the page scrolls sideways (${document.documentElement.scrollWidth} px)`);
  return clipped;
}"""

# What a cell printed (a verdict, a table of numbers, a traceback): the end of a line is often
# its point, so it must wrap at the column, not hide behind a sideways scrollbar.
SCROLLING_OUTPUTS_JS = """() => {
  const article = document.querySelector('article') || document.body;
  // A listing that a cell shows (show_source: highlight-cuda, not an output) scrolls instead.
  const printed = el => { const box = el.closest('[class*="highlight-"]');
                          return !box || box.classList.contains('output'); };
  return [...article.querySelectorAll('div.cell_output pre')]
    .filter(el => printed(el) && el.scrollWidth > el.clientWidth + 1)
    .map(el => `${el.scrollWidth} px in ${el.clientWidth}: ${(el.innerText || '').slice(0, 60)}`);
}"""

# Code (the cells' own, the listings they show, the prose's blocks) keeps its lines: a line
# that wraps breaks a statement in two. Every fold is opened first (the listings' <details>,
# the solutions' dropdowns), then each block's height is compared with its height when it
# cannot wrap (white-space: pre; a sideways scrollbar only adds height there).
WRAPPED_CODE_JS = """() => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  for (const e of document.querySelectorAll('.toggle-hidden')) e.classList.remove('toggle-hidden');
  const article = document.querySelector('article') || document.body;
  const wrapped = [];
  for (const pre of article.querySelectorAll('div[class*="highlight-"]:not(.output) pre')) {
    const shown = pre.getBoundingClientRect().height;
    const style = pre.style.whiteSpace;
    pre.style.whiteSpace = 'pre';
    const unwrapped = pre.getBoundingClientRect().height;
    pre.style.whiteSpace = style;
    if (shown === 0) wrapped.push(`hidden: ${pre.textContent.slice(0, 60)}`);
    else if (shown > unwrapped + 1)
      wrapped.push(`${Math.round(shown)} px high, ${Math.round(unwrapped)} unwrapped: ` +
                   pre.textContent.slice(0, 60));
  }
  return wrapped;
}"""

# A version shown as its change (show_diff): every removed and added line has a background of
# its own, so the change reads at a glance (the theme colours only removed text, in blue).
UNMARKED_DIFF_LINES_JS = """() => [...document.querySelectorAll('.highlight-diff .gd, .highlight-diff .gi')]
  .filter(el => ['rgba(0, 0, 0, 0)', 'transparent'].includes(getComputedStyle(el).backgroundColor))
  .map(el => el.textContent.slice(0, 60))"""

# Fresh profile, nothing phones home: the book must work offline.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="module")
def build():
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb), "build", str(ROOT), "-W", "-n", "--keep-going", "--all"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc


def test_book_builds_without_warnings(build):
    output = build.stdout + build.stderr
    assert build.returncode == 0, output[-5000:]
    assert "WARNING" not in output, output[-5000:]
    assert (HTML / "index.html").is_file()


def test_math_is_served_by_the_book(build):
    # MathJax ships with the book (sphinx-mathjax-offline): readers offline get math too.
    assert (HTML / "_static" / "mathjax" / "tex-chtml.js").is_file()


def test_setup_page_links_the_repository(build):
    # book/setup.md builds the link from {{ repository_url }}: the address stays in _config.yml.
    text = (HTML / "book" / "setup.html").read_text()
    assert re.search(r"clone the repository, <a [^>]*href=\"" + re.escape(REPO_URL) + "\"", text), \
        "book/setup.md does not link the repository"


# ---- in the browser ---------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(build):
    # With --keep-going the HTML exists even after warnings: check it all the same.
    assert (HTML / "book" / "intro.html").is_file(), "the book did not build"
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (Debian package chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        # playwright starts every launch with a fresh temporary profile (user data dir).
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def visit(browser, base, rel):
    """Load one page and record what a reader's browser would see."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(30_000)
    report = {"errors": [], "offsite": [], "failed": []}
    page.on("console", lambda m: m.type == "error" and report["errors"].append(m.text))
    page.on("pageerror", lambda e: report["errors"].append(f"uncaught: {e}"))
    page.on("response", lambda r: r.status >= 400 and report["failed"].append(f"{r.status} {r.url}"))
    page.on("requestfailed", lambda r: report["failed"].append(f"{r.failure} {r.url}"))

    # Nothing may come from another host (readers may be offline; CI is).
    page.on("request", lambda r: r.url.startswith((base, "data:", "blob:"))
            or report["offsite"].append(r.url))
    refresh = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', (HTML / rel).read_text())
    page.goto(f"{base}/{rel}", wait_until="load")
    if refresh:
        # jupyter-book's index.html only redirects: check where it lands, nothing else.
        page.wait_for_url(urljoin(f"{base}/{rel}", refresh.group(1)))
        report.update(math=0, math_errors=0, images=[], links=[], clipped=[], figures=[],
                      scrolling_outputs=[], wrapped_code=[], diff_lines=0, unmarked_diff=[])
        page.close()
        return report
    if page.locator("script[src*='mathjax']").count():
        # MathJax typesets asynchronously; its startup promise resolves when done.
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("MathJax.startup.promise")
    report["math"] = page.locator("mjx-container").count()
    report["math_errors"] = page.locator("mjx-merror").count()
    report["images"] = page.eval_on_selector_all(
        "img", "els => els.map(e => [e.getAttribute('src'), e.complete ? e.naturalWidth : 0])")
    report["links"] = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    report["clipped"] = page.evaluate(CLIPPED_JS)
    report["scrolling_outputs"] = page.evaluate(SCROLLING_OUTPUTS_JS)
    report["diff_lines"] = page.locator(".highlight-diff .gd, .highlight-diff .gi").count()
    report["unmarked_diff"] = page.evaluate(UNMARKED_DIFF_LINES_JS)
    # Figures of cell outputs: the PNG's own width and the width it is shown at.
    report["figures"] = page.eval_on_selector_all(
        "div.cell_output img", "els => els.map(e => [e.getAttribute('src'), e.naturalWidth, "
        "Math.round(e.getBoundingClientRect().width)])")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / (rel.replace("/", "__").removesuffix(".html") + ".jpg"),
                    full_page=True, type="jpeg", quality=70)
    report["wrapped_code"] = page.evaluate(WRAPPED_CODE_JS)  # opens the folds: after the shot
    page.close()
    return report


@pytest.fixture(scope="module")
def pages(server, browser):
    rels = sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if not p.relative_to(HTML).parts[0].startswith("_"))
    assert "book/intro.html" in rels
    return {rel: visit(browser, server, rel) for rel in rels}, server


def test_pages_have_no_console_errors(pages):
    reports, _ = pages
    bad = {rel: r["errors"] + r["failed"] for rel, r in reports.items() if r["errors"] or r["failed"]}
    assert not bad, bad


def test_pages_load_nothing_from_other_hosts(pages):
    reports, _ = pages
    bad = {rel: r["offsite"] for rel, r in reports.items() if r["offsite"]}
    assert not bad, bad


def test_math_renders(pages):
    reports, _ = pages
    intro = reports["book/intro.html"]
    assert intro["math"] > 0, "MathJax produced no mjx-container on the intro page"
    bad = {rel: r["math_errors"] for rel, r in reports.items() if r["math_errors"]}
    assert not bad, f"MathJax errors: {bad}"


def test_images_load(pages):
    reports, _ = pages
    bad = {rel: [src for src, width in r["images"] if not width]
           for rel, r in reports.items()}
    bad = {rel: srcs for rel, srcs in bad.items() if srcs}
    assert not bad, f"images that did not load: {bad}"


def test_nothing_is_cut_off_at_1280_px(pages):
    """Tables, listings and outputs fit the column or scroll where the reader sees it."""
    reports, _ = pages
    bad = {rel: r["clipped"] for rel, r in reports.items() if r["clipped"]}
    assert not bad, f"content cut off at {VIEWPORT['width']} px: {bad}"


def test_printed_outputs_wrap_at_the_column(pages):
    """No verdict, printed table or traceback needs a sideways scroll at 1280 px."""
    reports, _ = pages
    bad = {rel: r["scrolling_outputs"] for rel, r in reports.items() if r["scrolling_outputs"]}
    assert not bad, f"printed outputs that scroll sideways at {VIEWPORT['width']} px: {bad}"


def test_code_never_wraps(pages):
    """Listings (chapters, solutions, folds), cells' code and the prose's code blocks keep every
    line whole at 1280 px, scrolling sideways in their box where a line is too long."""
    reports, _ = pages
    count = sum(len(r["wrapped_code"]) for r in reports.values())
    bad = {rel: r["wrapped_code"] for rel, r in reports.items() if r["wrapped_code"]}
    assert not bad, f"{count} code blocks wrap at {VIEWPORT['width']} px: {bad}"


def test_diff_listings_mark_each_changed_line(pages):
    """The chapters show versions as diffs (kernels.course.notebook.show_diff), and each
    removed or added line is shaded."""
    reports, _ = pages
    assert reports["chapters/03_block_reduction.html"]["diff_lines"] > 0
    bad = {rel: r["unmarked_diff"][:3] for rel, r in reports.items() if r["unmarked_diff"]}
    assert not bad, f"diff lines without their shade: {bad}"


def test_figures_are_shown_at_their_drawn_size(pages):
    """A figure shown narrower than drawn shrinks its text below the body's small print.

    kernels.measure.plot.subplots draws every figure 800 px wide, within the 819 px column at 1280 px.
    """
    reports, _ = pages
    bad = {rel: [(src[-20:], drawn, shown) for src, drawn, shown in r["figures"]
                 if drawn and shown < 0.9 * drawn] for rel, r in reports.items()}
    bad = {rel: figures for rel, figures in bad.items() if figures}
    assert not bad, f"figures shown below 90% of their drawn width: {bad}"


def test_launch_and_repository_buttons(pages):
    reports, _ = pages
    owner_repo = urlsplit(REPO_URL).path.strip("/")
    notebooks = toc_notebooks()
    assert notebooks, "no notebook pages in _toc.yml"
    for nb in notebooks:
        links = reports[f"{nb}.html"]["links"]
        colab = f"https://colab.research.google.com/github/{owner_repo}/blob/{BRANCH}/{nb}.ipynb"
        assert colab in links, f"{nb}: no Colab button to {colab}"
    for rel, r in reports.items():
        if rel not in ("index.html", "genindex.html", "search.html"):  # index: a redirect
            assert any(link.rstrip("/") == REPO_URL for link in r["links"]), \
                f"{rel}: no repository button to {REPO_URL}"


def _ids(path):
    """The id and name attributes in one HTML file (anchors a link may target)."""
    from html.parser import HTMLParser

    class Ids(HTMLParser):
        def __init__(self):
            super().__init__()
            self.ids = set()

        def handle_starttag(self, tag, attrs):
            for key, value in attrs:
                if key in ("id", "name") and value:
                    self.ids.add(value)

    parser = Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser.ids


def test_internal_links_resolve(pages):
    reports, base = pages
    ids = {}
    broken = []
    for rel, r in reports.items():
        for link in r["links"]:
            if not link.startswith(base + "/"):
                continue
            parts = urlsplit(link)
            target = HTML / unquote(parts.path).lstrip("/")
            if parts.path.endswith("/"):
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{rel} -> {link}")
                continue
            if parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = _ids(target)
                if unquote(parts.fragment) not in ids[target]:
                    broken.append(f"{rel} -> {link} (no such anchor)")
    assert not broken, "\n".join(sorted(set(broken)))
