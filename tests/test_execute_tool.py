"""tools/execute.py: in place for the book's outputs, or copies under --out for the small-GPU run."""

import csv
import importlib.util
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("execute_tool", ROOT / "tools" / "execute.py")
execute_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute_tool)


def notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_the_memory_cap_is_a_start_up_file_of_the_kernels_profile(tmp_path):
    execute_tool.cap_memory(tmp_path, 15)
    startup = (tmp_path / "profile_default" / "startup" / "00-memory-cap.py").read_text()
    assert "set_per_process_memory_fraction(min(1.0, 15 * 2**30 / _total))" in startup
    compile(startup, "00-memory-cap.py", "exec")


@pytest.mark.timeout(300)
def test_out_keeps_the_original_and_the_summary_names_the_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELS_ARCHS", "7.5+PTX")
    good = notebook(Path("nb") / "good.ipynb", "print(6 * 7)")
    bad = notebook(Path("nb") / "bad.ipynb", "print('before')", "raise ValueError('out of memory')")
    before = good.read_text()
    monkeypatch.setattr(sys, "argv", ["execute.py", "--out", "small", "--summary", "run.csv",
                                      str(good), str(bad)])
    assert execute_tool.main() == 1
    assert good.read_text() == before  # the stored notebook is untouched
    ran = nbformat.read(Path("small") / good, as_version=4)
    assert ran.cells[0].outputs[0]["text"] == "42\n"
    failed = nbformat.read(Path("small") / bad, as_version=4)  # written, to show where it failed
    assert failed.cells[0].outputs[0]["text"] == "before\n"
    rows = list(csv.DictReader(open("run.csv")))
    assert [r["notebook"] for r in rows] == [str(good), str(bad)]
    assert rows[0]["outcome"] == "ok" and rows[0]["archs"] == "7.5+PTX"
    assert rows[1]["outcome"] == "FAILED: ValueError: out of memory"  # the error, on one line
    assert "KERNELS_SOURCES_LOG" not in os.environ and "IPYTHONDIR" not in os.environ


@pytest.mark.timeout(300)
def test_the_host_speed_is_measured_before_the_notebook_runs(tmp_path, monkeypatch):
    """Just after a run the notebook's kernel is still shutting down and the host reads slow: the
    record keeps the measurement taken before the first cell (here: before it writes a file)."""
    from kernels.measure import envinfo

    ran = tmp_path / "ran"
    monkeypatch.setattr(envinfo, "host_op_us", lambda: 2.5 if ran.exists() else 1.25)
    path = notebook(tmp_path / "nb.ipynb", f"open({str(ran)!r}, 'w').close()")
    execute_tool.execute(path, timeout=120)
    assert ran.exists()
    environment = nbformat.read(path, as_version=4).metadata["course"]["environment"]
    assert environment["host_us_per_op"] == 1.25


def test_a_summary_split_over_calls_adds_up(tmp_path):
    path = tmp_path / "run.csv"
    row = {"notebook": "a", "outcome": "ok", "seconds": 1}
    execute_tool.write_summary(path, [row, {**row, "notebook": "b"}])
    execute_tool.write_summary(path, [{**row, "notebook": "b", "outcome": "FAILED: x"},
                                      {**row, "notebook": "c"}])
    rows = list(csv.DictReader(open(path)))
    assert [(r["notebook"], r["outcome"]) for r in rows] == [("a", "ok"), ("b", "FAILED: x"),
                                                             ("c", "ok")]


@pytest.mark.timeout(300)
def test_slow_cells_are_named_as_they_finish(tmp_path, monkeypatch, capsys):
    """A notebook that outgrows a device call's limit shows which cells grew."""
    monkeypatch.setattr(execute_tool, "SLOW_CELL_S", 0.5)
    path = notebook(tmp_path / "nb.ipynb", "x = 1", "import time\ntime.sleep(1)")
    execute_tool.execute(path, timeout=120)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines  # the slow cell only
    assert re.fullmatch(r"  nb\.ipynb cell 1: \d+ s  import time", lines[0]), lines
