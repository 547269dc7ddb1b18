"""The notebooks follow the course's conventions (no GPU needed).

For every notebook in chapters/ and solutions/ that has code cells:

(a) the first cell is exactly ``kernels.course.notebook.SETUP_CELL`` for the repository of _config.yml;
(b) a cell that builds a kernel file, ``load("chX/file.cu")``, follows a code cell that shows
    that same file with ``show_source("chX/file.cu")`` (unless shown earlier in the notebook,
    or a kernel of an earlier chapter);
(c) cells that need a GPU are tagged ``gpu``; cells that time, and cells that tabulate or plot
    measured results, are ``nbval-ignore-output``;
(d) stored outputs are not older than the kernel sources they were produced from
    (``metadata.course.sources``, written by tools/execute.py);
(e) the .ipynb matches its py:percent twin;
and (f) book/status.md is up to date with the notebooks' metadata.
"""

import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import nbformat
import pytest
import yaml

from kernels.build import skeletons
from kernels.build.provenance import cells_not_run, changed_sources
from kernels.course.book import notebooks as all_notebooks
from kernels.course.book import toc_files
from kernels.course.notebook import SETUP_CELL, SETUP_TAG

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
RERUN = "re-execute on a GPU: tools/gpu_run.sh"


def read(path):
    return nbformat.read(path, as_version=4)


def code_cells(notebook):
    return [c for c in notebook.cells if c.cell_type == "code"]


def notebooks_with_code():
    return [p for p in all_notebooks() if code_cells(read(p))]


def rel(path):
    return path.relative_to(ROOT).as_posix()


def tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def code_without_comments(source: str) -> str:
    """The cell's code with comments removed (so that a comment never triggers a rule)."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type != tokenize.COMMENT]
        return tokenize.untokenize(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source  # e.g. IPython magics: check the raw text


# Building a kernel file: load("x.cu"), kernels.load("x.cu") or a chapter's
# ch.exercise("x.cu", check), not another object's load (json.load, some_module.load).
LOAD_LITERAL = re.compile(
    r"(?:(?:(?<![\w.])|\bkernels\.)load|\.exercise)\(\s*(['\"])([^'\"]+\.cu)\1")
# show_source("f"), or show_diff("older", "f"): both show the file f
SHOW_LITERAL = r"\b(?:show_source\(|show_diff\([^)]*?,)\s*(['\"]){}\1"

# What needs a GPU. bench's CPU-only helpers (SIZES, element_wise_shape, gbps, rotation_count,
# Measurement) are allowed without the tag; everything else in bench times on the GPU.
TIMING = r"(?:time_ms|launch_overhead_ms|sweep|bench_loss|read_bandwidth|copy_bandwidth)\("
CPU_BENCH = r"(?:SIZES|element_wise_shape|gbps|rotation_count|Measurement)\b"
GPU_PATTERNS = {
    "builds a kernel (load)": r"(?:(?<![\w.])|\bkernels\.)load\(",
    "builds and checks an exercise (Chapter.exercise)": r"\.exercise\(",
    "checks a kernel (check)": r"(?:(?<![\w.])|\bkernels\.(?:check\.)?)check\(",
    "uses CUDA (.cuda)": r"(?<!version)\.cuda\b(?!\.is_available)",
    'allocates on the GPU (device="cuda")': r"device\s*=\s*['\"]cuda",
    "times with kernels.bench": r"\bbench\.(?!" + CPU_BENCH + ")",
    "measures bandwidth": r"\bread_bandwidth\b|\bcopy_bandwidth\b",
    "asks a Chapter for the GPU or its bandwidth (.gpu, .peak)": r"\.(?:gpu|peak)\b",
    "times": r"(?<![\w])" + TIMING,
}
# Reading measured rows: results.read_rows("ch3"), a Chapter's ch.rows() or ch.published_rows().
SHOWS_RESULTS = re.compile(r"\.(?:read_rows|rows|published_rows)\(|markdown_table\(|"
                           r"speedup_table\(|plot_throughput\(")
TIMES = re.compile(r"\bbench\.(?!" + CPU_BENCH + r")\w+|(?<![\w])" + TIMING)


# --- every notebook of the book has code -----------------------------------------------------

def test_every_chapter_and_solution_of_the_toc_has_code_cells():
    files = [f for f in toc_files() if f.startswith(("chapters/", "solutions/"))]
    assert files, "_toc.yml lists no chapter or solution"
    empty = []
    for file in files:
        path = ROOT / f"{file}.ipynb"
        if not path.is_file() or not code_cells(read(path)):
            empty.append(f"{file}.ipynb")
    assert not empty, f"notebooks in _toc.yml that are missing or have no code cell: {empty}"


NOTEBOOKS = notebooks_with_code()
by_notebook = pytest.mark.parametrize("path", NOTEBOOKS, ids=rel)


# --- (a) the setup cell ----------------------------------------------------------------------

@by_notebook
def test_first_cell_is_the_setup_cell(path):
    first = read(path).cells[0]
    expected = SETUP_CELL.format(repository=REPOSITORY)
    assert first.cell_type == "code", f"{rel(path)}: the first cell must be the setup code cell"
    assert first.source.rstrip("\n") == expected, (
        f"{rel(path)}: the first cell is not kernels.course.notebook.SETUP_CELL with repository "
        f"{REPOSITORY}; print it with: python -c \"from kernels.course.notebook import SETUP_CELL; "
        f"print(SETUP_CELL.format(repository='{REPOSITORY}'))\"")
    assert SETUP_TAG in first.metadata.get("tags", []), (
        f"{rel(path)}: tag the setup cell {SETUP_TAG}: the book leaves it out, Jupyter keeps it")


# --- (b) each built file is shown right before --------------------------------------------

def chapter_number(path) -> int:
    """1 for chapters/01_naive_pytorch.ipynb and solutions/ch1_solutions.ipynb."""
    return int(re.match(r"(?:ch)?0*(\d+)", path.name).group(1))


def from_earlier_chapter(literal: str, chapter: int) -> bool:
    found = re.match(r"ch(\d+)_", literal)
    return found is not None and int(found.group(1)) < chapter


@by_notebook
def test_each_load_is_preceded_by_show_source_of_the_same_file(path):
    """The code cell before a build shows the file it builds (markdown may stand between).

    A file shown earlier in the same notebook, or a kernel of an earlier chapter (brought back
    for comparison), need not be shown again.
    """
    cells = read(path).cells
    chapter = chapter_number(path)
    shown_so_far = set()
    previous_code = None
    problems = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        code = code_without_comments(cell.source)
        for _, literal in LOAD_LITERAL.findall(code):
            shown = previous_code is not None and re.search(
                SHOW_LITERAL.format(re.escape(literal)), previous_code)
            if not (shown or literal in shown_so_far or from_earlier_chapter(literal, chapter)):
                problems.append(f"cell {i} loads {literal!r} but the code cell before it does "
                                f"not call show_source({literal!r})")
        shown_so_far.update(m[1] for m in re.findall(SHOW_LITERAL.format(r"([^'\"]+)"), code))
        previous_code = code
    assert not problems, f"{rel(path)}:\n" + "\n".join(problems)


# --- (c) tags --------------------------------------------------------------------------------

@by_notebook
def test_gpu_cells_are_tagged(path):
    problems = []
    for i, cell in enumerate(read(path).cells):
        if cell.cell_type != "code":
            continue
        code = code_without_comments(cell.source)
        why = [what for what, pattern in GPU_PATTERNS.items() if re.search(pattern, code)]
        if why and "gpu" not in tags(cell):
            problems.append(f"cell {i} {', '.join(why)} but is not tagged gpu: "
                            f"{cell.source.strip().splitlines()[0][:80]!r}")
        timing = TIMES.search(code)
        if timing and not {"gpu", "nbval-ignore-output"} <= tags(cell):
            problems.append(f"cell {i} times ({timing.group(0)}) and must be tagged both gpu and "
                            f"nbval-ignore-output (it has {sorted(tags(cell))})")
        # Tables and plots of results show measured numbers: a GPU validation run measures anew.
        shows = SHOWS_RESULTS.search(code)
        if shows and "nbval-ignore-output" not in tags(cell):
            problems.append(f"cell {i} shows measured results ({shows.group(0)}) and must be "
                            f"tagged nbval-ignore-output")
    assert not problems, f"{rel(path)}:\n" + "\n".join(problems)


LEARNER_LISTING = re.compile(r'show_source\("exercises/([^"]+)"')


@by_notebook
def test_listings_of_exercise_files_are_not_compared(path):
    """A learner edits the file a listing shows: nbval must grade the exercise, not the listing."""
    learner = {p.name for p in skeletons.learner_files()}
    untagged = [cell.source.strip() for cell in read(path).cells if cell.cell_type == "code"
                for m in LEARNER_LISTING.finditer(cell.source)
                if m.group(1) in learner and "nbval-ignore-output" not in tags(cell)]
    assert not untagged, f"{rel(path)}: tag these nbval-ignore-output: {untagged}"


# --- (d) stored outputs are not stale --------------------------------------------------------

@by_notebook
def test_stored_outputs_match_the_kernel_sources(path):
    notebook = read(path)
    course = notebook.metadata.get("course")
    gpu_outputs = [i for i, c in enumerate(notebook.cells)
                   if c.cell_type == "code" and "gpu" in tags(c) and c.get("outputs")]
    if course is None:
        assert not gpu_outputs, (
            f"{rel(path)} has stored outputs of gpu cells {gpu_outputs} but no course metadata "
            f"(which GPU and which kernel sources produced them): {RERUN}")
        return
    problems = changed_sources(course)
    assert not problems, f"{rel(path)}: " + "; ".join(problems) + f": {RERUN}"


@by_notebook
def test_every_code_cell_of_an_executed_notebook_ran(path):
    """A cell without an execution count lost its outputs (tools/sync_notebooks.py empties a cell
    whose code changed): the page would show the code and nothing it printed."""
    notebook = read(path)
    if notebook.metadata.get("course") is None:
        return  # never executed on a GPU: test_stored_outputs_match_the_kernel_sources covers it
    not_run = cells_not_run(notebook)
    assert not not_run, (f"{rel(path)}: code cells {not_run} have no execution count: execute "
                         f"the notebook again (or tools/fill_cpu_cells.py for CPU cells)")


# --- (e) the .py twin ------------------------------------------------------------------------

def _sync_module():
    spec = importlib.util.spec_from_file_location("sync_notebooks",
                                                  ROOT / "tools" / "sync_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@by_notebook
def test_notebook_matches_its_py_twin(path):
    twin = path.with_suffix(".py")
    assert twin.is_file(), f"{rel(path)} has no py:percent twin {rel(twin)}"
    sync = _sync_module()
    assert sync.cells_of(read(path)) == sync.cells_of(sync.synced(twin)), (
        f"{rel(path)} differs from {rel(twin)}: run python tools/sync_notebooks.py "
        f"(never edit the .ipynb by hand)")


@by_notebook
def test_notebook_asks_colab_for_a_gpu_runtime(path):
    metadata = read(path).metadata
    wanted = _sync_module().COLAB_GPU
    assert {k: metadata.get(k) for k in wanted} == wanted, (
        f"{rel(path)}: Colab opens it on a CPU runtime; run python tools/sync_notebooks.py")


OUTPUT_LIMIT = 5000  # characters of one stored text output a reader is shown unfolded (issue 14)


@by_notebook
def test_long_outputs_are_folded_listings(path):
    """No stored text output over 5 KB reaches the page unless it is a folded kernel listing
    (``show_source``'s <details>, or any listing of a solution, which its dropdown folds):
    profiler tables and printouts are trimmed to what matters."""
    def folded_listing(text):
        # show_diff: the diff on the page, the whole file in a fold after it
        unfolded = re.sub(r'<details class="listing">.*?</details>', "", text, flags=re.S)
        return len(unfolded) <= OUTPUT_LIMIT or (
            path.parent.name == "solutions" and re.match(r"`[^`\n]+`\n\n```", text))

    long = []
    for i, cell in enumerate(read(path).cells):
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")] + [v for k, v in output.get("data", {}).items()
                                                if k.startswith("text/")]
            for text in texts:
                text = "".join(text)
                if len(text) > OUTPUT_LIMIT and not folded_listing(text):
                    long.append(f"cell {i}: {len(text)} characters")
    assert not long, f"{rel(path)}: outputs past {OUTPUT_LIMIT} characters: {long}"


def test_every_py_twin_has_its_notebook():
    """The per-notebook test above compares each .ipynb with its twin; this catches the reverse."""
    orphans = [rel(py) for py in _sync_module().twins() if not py.with_suffix(".ipynb").is_file()]
    assert not orphans, f"py:percent twins without a notebook: {orphans}: run tools/sync_notebooks.py"


# --- (f) the status page ---------------------------------------------------------------------

def test_status_page_is_up_to_date():
    proc = subprocess.run([sys.executable, "tools/status.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the rules themselves (so that a wrong pattern cannot pass every notebook) ---------------

def _gpu_reasons(source):
    code = code_without_comments(source)
    return [what for what, pattern in GPU_PATTERNS.items() if re.search(pattern, code)]


@pytest.mark.parametrize("source", [
    'k = load("ch3_block_reduction/v3_sequential.cu")',
    'k = kernels.load("ch3_block_reduction/v3_sequential.cu")',
    'check(k.mse, "mse")',
    'kernels.check(k.mse, "mse")',
    "x = torch.randn(10).cuda()",
    'x = torch.randn(10, device="cuda")',
    "peak = kernels.bench.read_bandwidth()",
    "rows = bench.sweep(providers, 'mse', shapes)",
    "print(torch.cuda.get_device_name())",
    'print(f"{ch.gpu}: read bandwidth {ch.peak:.0f} GB/s")',
    'ch.exercise("exercises/ch5_ignore_index.cu", check_ignore_index)',
])
def test_rule_needs_gpu(source):
    assert _gpu_reasons(source), source


@pytest.mark.parametrize("source", [
    'rows = kernels.results.read_rows("ch3")',
    "rows = results.read_rows('ch3')",
    'ch = Chapter("ch7", bandwidth="copy")',
    "rows = ch.rows()",
    'rows = Chapter("ch1").published_rows()',
    'print(rows[0]["gpu"], rows[0]["peak_gbps"])',
    "shapes = [kernels.bench.element_wise_shape(n, 'mse') for n in kernels.bench.SIZES]",
    "print(torch.version.cuda, torch.cuda.is_available())",
    "# load(\"ch3/v1.cu\") in a comment only",
    'show_source("ch3_block_reduction/v3_sequential.cu")',
    "subprocess.run(['ls'], check=True)",
])
def test_rule_runs_on_cpu(source):
    assert not _gpu_reasons(source), source


def test_rule_load_literal():
    assert LOAD_LITERAL.findall('k = load("ch3/v1.cu"); r = results.read_rows("ch3")') == [
        ('"', "ch3/v1.cu")]
    assert LOAD_LITERAL.findall("ch.exercise('exercises/ch2_race.cu', check)") == [
        ("'", "exercises/ch2_race.cu")]
    assert not LOAD_LITERAL.findall('x = other.load("ch3/v1.cu")')  # not a build of ours
    assert re.search(SHOW_LITERAL.format(re.escape("ch3/v1.cu")), "show_source('ch3/v1.cu', start='x')")
    assert re.search(SHOW_LITERAL.format(re.escape("ch3/v2.cu")), 'show_diff("ch3/v1.cu", "ch3/v2.cu")')
    assert not re.search(SHOW_LITERAL.format(re.escape("ch3/v1.cu")), 'show_diff("ch3/v1.cu", "ch3/v2.cu")')
    assert TIMES.search("ms = kernels.bench.time_ms(f, args)")
    assert not TIMES.search("n = kernels.bench.SIZES[0]")


@pytest.mark.parametrize("source", [
    'rows = results.read_rows("ch3")',
    "rows = ch.rows()",
    'rows = ch.published_rows("ch6_bf16")',
    'Markdown(results.markdown_table(rows, ["eager", "v1"], "mse"))',
])
def test_rule_shows_results(source):
    assert SHOWS_RESULTS.search(source), source
    assert not SHOWS_RESULTS.search('k = load("ch3/v1.cu"); ch = Chapter("ch3")')


def test_listings_show_the_files_as_they_are():
    """A cell that only shows a file must show its current text (tools/refresh_listings.py)."""
    proc = subprocess.run([sys.executable, "tools/refresh_listings.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_small_gpu_run_lists_every_notebook_it_ran_or_has_not_reached():
    sys.path.insert(0, str(ROOT / "tools"))
    import status

    row = {"gpu": "NVIDIA T4", "archs": "7.5+PTX", "date": "2026-11-25", "memory_cap_gib": "15.0"}
    rows = [{**row, "notebook": "b.ipynb", "outcome": "ok", "seconds": "30"},
            {**row, "notebook": "a.ipynb", "seconds": "12",
             "outcome": "FAILED: OutOfMemoryError: CUDA out of memory. Tried to allocate 4 GiB"}]
    section = status.small_gpu_section(rows, ["a.ipynb", "b.ipynb", "c.ipynb"])
    table = [line for line in section.splitlines() if line.startswith("| `")]
    assert table == ["| `a.ipynb` | failed: OutOfMemoryError | 12 |", "| `b.ipynb` | ran | 30 |"]
    assert "1 of 3 notebooks ran without an error, in 30 s together. Not run yet: `c.ipynb`." in section
    assert "NVIDIA T4, built for 7.5+PTX, 2026-11-25" in section and "15.0 GiB" in section
    assert status.small_gpu_section([], ["a.ipynb"]) == ""
    # a run spread over two machines says which GPU ran each notebook
    rows[1]["gpu"] = "NVIDIA A100"
    table = [line for line in status.small_gpu_section(rows, ["a.ipynb", "b.ipynb"]).splitlines()
             if line.startswith("| `")]
    assert table == ["| `a.ipynb` | NVIDIA A100 | failed: OutOfMemoryError | 12 |",
                     "| `b.ipynb` | NVIDIA T4 | ran | 30 |"]


def test_the_status_page_shows_each_notebooks_host_speed(tmp_path, monkeypatch):
    """A slow host moves every host-bound timing: the page shows the speed each run recorded,
    and a dash for a notebook executed before it was recorded."""
    sys.path.insert(0, str(ROOT / "tools"))
    import status

    env = {"gpu": "G", "driver": "d", "torch": "t", "cuda": "c", "nvcc": "n", "date": "D"}
    paths = []
    for name, extra in (("a", {"host_us_per_op": 0.874}), ("b", {}), ("c", {"host_op_us": 2.7})):
        nb = nbformat.v4.new_notebook()
        nb.metadata["course"] = {"environment": {**env, **extra}, "sources": {}}
        paths.append(tmp_path / f"{name}.ipynb")
        nbformat.write(nb, paths[-1])
    monkeypatch.setattr(status, "ROOT", tmp_path)
    monkeypatch.setattr(status, "notebooks", lambda: paths)
    rows = [line for line in status.render().splitlines() if line.startswith("| `")]
    assert rows[:3] == ["| `a.ipynb` | A | D | 0.87 | `–` |", "| `b.ipynb` | A | D | – | `–` |",
                        "| `c.ipynb` | A | D | – | `–` |"]


def test_the_host_speed_is_a_positive_time_per_call():
    from kernels.measure.envinfo import host_op_us

    assert 0 < host_op_us(calls=50, runs=3) < 1e4


# --- (g) code that fits the book's column -----------------------------------------------------

# The book's code column shows about 95 characters at 1280 px; a longer line wraps. Every
# notebook fits it now; a notebook that must keep longer lines for a while is listed here with
# their count, which may only go down. The setup cell is left out of the book.
LONG_CODE_LINES: dict[str, int] = {}
CODE_COLUMN = 95


@by_notebook
def test_code_lines_fit_the_book_column(path):
    long = [line for cell in code_cells(read(path)) if SETUP_TAG not in tags(cell)
            for line in cell.source.splitlines() if len(line) > CODE_COLUMN]
    allowed = LONG_CODE_LINES.get(rel(path), 0)
    assert len(long) <= allowed, (
        f"{rel(path)}: {len(long)} code lines over {CODE_COLUMN} characters (they wrap in the "
        f"book at 1280 px; {allowed} allowed for now), e.g. {long[0]!r}")
    assert len(long) == allowed, (
        f"{rel(path)}: {allowed - len(long)} long lines reflowed: lower LONG_CODE_LINES to "
        f"{len(long)}")


def test_show_diff_shows_the_change_and_folds_the_new_file():
    from kernels.course.notebook import show_diff

    old, new = "ch3_block_reduction/v2_interleaved_strided.cu", "ch3_block_reduction/v3_sequential.cu"
    text = show_diff(old, new).data
    diff, fold = text.split('<details class="listing">')
    assert "-    for (unsigned s = 1; s < kThreads; s *= 2) {" in diff.splitlines()
    assert "+        if (tid < s) sdata[tid] += sdata[tid + s];" in diff.splitlines()
    changed = sum(line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
                  for line in diff.splitlines())
    assert f"({changed} lines changed)" in diff
    whole = (ROOT / "kernels" / new).read_text()
    assert whole.strip() in fold and fold.rstrip().endswith("</details>")
