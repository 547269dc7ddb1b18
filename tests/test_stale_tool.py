"""tools/stale.py: which notebooks a GPU run must redo, packed into calls under the device limit."""

import hashlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("stale", ROOT / "tools" / "stale.py")
stale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stale)

from kernels.build.provenance import changed_sources  # noqa: E402


def test_calls_stay_under_the_limit_longest_first():
    calls = stale.pack({"ch9": 420, "ch6": 190, "ch7": 100, "sol7": 53, "sol6": 32}, 540)
    assert calls == [["ch9", "ch7"], ["ch6", "sol7", "sol6"]]


def test_a_notebook_longer_than_the_limit_gets_its_own_call():
    assert stale.pack({"long": 900, "short": 10}, 540) == [["long"], ["short"]]


def test_notebooks_are_packed_per_gpu_they_last_ran_on():
    def run(name, gpu, seconds):
        return ROOT / name, ["changed"], {"seconds": seconds, "environment": {"gpu": gpu}}

    stale_list = [run("chapters/a.ipynb", "H100", 300), run("chapters/b.ipynb", "2 x H200", 100),
                  run("chapters/c.ipynb", "H100", 200), run("chapters/d.ipynb", "H100", None)]
    assert stale.calls_by_gpu(stale_list, 540, unknown=250) == {
        "H100": [["chapters/a.ipynb", "chapters/c.ipynb"], ["chapters/d.ipynb"]],
        "2 x H200": [["chapters/b.ipynb"]]}


def test_changed_sources_names_each_changed_or_missing_file():
    file = "kernels/common/reduce.cuh"
    digest = hashlib.sha256((ROOT / file).read_bytes()).hexdigest()
    assert changed_sources({"sources": {file: digest}}) == []
    assert changed_sources({"sources": {file: "0" * 64, "kernels/gone.cu": digest}}) == [
        f"{file} changed since the notebook was executed", "kernels/gone.cu no longer exists"]


def test_a_code_cell_without_outputs_makes_an_executed_notebook_stale():
    import nbformat

    cells = [nbformat.v4.new_code_cell("print(1)", execution_count=1),
             nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("print(2)")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    assert stale.what_changed(notebook) == []  # never executed: nothing stored to be stale
    notebook.metadata["course"] = {"sources": {}}
    assert stale.what_changed(notebook) == ["code cells [2] changed since the notebook was executed"]
    notebook.cells[2].execution_count = 2
    assert stale.what_changed(notebook) == []
