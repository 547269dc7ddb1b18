"""tools/claims.py: a notebook's prose printed beside its outputs, in order."""

import importlib.util
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("claims_tool", ROOT / "tools" / "claims.py")
claims = importlib.util.module_from_spec(spec)
spec.loader.exec_module(claims)


def executed_notebook(path: Path) -> Path:
    v4 = nbformat.v4
    table = v4.new_code_cell("Markdown(table)\n# second line", outputs=[v4.new_output(
        "execute_result", data={"text/markdown": "| n | ratio |\n|---|---|\n| 4096 | 1.01 |",
                                "text/plain": "<Markdown object>"}, execution_count=1)])
    printed = v4.new_code_cell("print(x)", outputs=[v4.new_output("stream", name="stdout",
                                                                  text="x" * 60 + "\n")])
    figure = v4.new_code_cell("plot()", outputs=[v4.new_output(
        "display_data", data={"image/png": "iVBORw0KGgo="})])
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("Version 5 is **level** at 2^12."), table,
                                printed, figure, v4.new_markdown_cell("The end.")])
    nbformat.write(nb, path)
    return path


def test_prose_and_outputs_in_order_with_indices(tmp_path, capsys):
    path = executed_notebook(tmp_path / "nb.ipynb")
    assert claims.main([str(path), "--width", "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["--- [0] markdown", "Version 5 is **level** at 2^12."]
    assert out[2] == "--- [1] code: Markdown(table)"  # the first line only
    assert out[3] == ">>> | n | ratio |"  # the Markdown form, not the object's repr
    assert out[5] == "| 4096 | 1.01 |"
    assert out[6:8] == ["--- [2] code: print(x)", ">>> " + "x" * 40 + " ... (60 characters)"]
    assert out[8] == "--- [3] code: plot()"  # a figure alone shows nothing
    assert out[9:] == ["--- [4] markdown", "The end."]


def test_a_range_of_cells(tmp_path, capsys):
    path = executed_notebook(tmp_path / "nb.ipynb")
    claims.main([str(path), "2", "4"])
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("---")]
    assert headers == ["--- [2] code: print(x)", "--- [3] code: plot()"]
