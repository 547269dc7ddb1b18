"""nbval_sanitize.cfg's masks, read as nbval reads them: each hides what varies from run to run
(a build time, a measured time after its label, an object's address) and nothing else (a
figure's 800x360, a 1000x1000 shape, a CUDA constant, a percentage in a kernel's comment)."""

import re
from pathlib import Path

import nbformat
import pytest
from nbval.plugin import get_sanitize_patterns

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = get_sanitize_patterns((ROOT / "nbval_sanitize.cfg").read_text())


def sanitize(text: str) -> str:
    for regex, replace in PATTERNS:  # nbval applies them in the file's order
        text = re.sub(regex, replace, text)
    return text


def test_every_section_is_read():
    assert len(PATTERNS) == 5


@pytest.mark.parametrize("text, masked", [
    ("<function f at 0x7f3a2b10>", "<function f at 0xADDRESS>"),
    ("<kernels.build.loader.Kernel object at 0x7F3A2B10C8D0>",
     "<kernels.build.loader.Kernel object at 0xADDRESS>"),
    ("ch2/v1.cu: mse (built in 12.3 s)", "ch2/v1.cu: mse (BUILD)"),
    ("ch2/v1.cu: mse (cached)", "ch2/v1.cu: mse (BUILD)"),
    ("2^22: measured   41.2 us, model   40.8 us", "2^22: measured   TIME, model   TIME"),
    ("hinge     2^26: ours 0.612 ms (95%)", "hinge     2^26: ours TIME (95%)"),
    ("        total  1.94 ms (+40%)", "        total  TIME (+40%)"),
    ("eager: 0.35 ms, torch.compile: 0.2 ms", "eager: TIME, torch.compile: TIME"),
    ("3.0  max  3.4  (median 1.7%)", "3.0  max  3.4  (median PERCENT)"),
    ("1.9x one GPU (efficiency 95%)", "1.9x one GPU (efficiency PERCENT)"),
    ("read at 2875.3 GB/s", "read at BANDWIDTH"),
])
def test_what_varies_is_masked(text, masked):
    assert sanitize(text) == masked


@pytest.mark.parametrize("text", [
    "<Figure size 800x360 with 1 Axes>",
    "a 1000x1000 matrix",
    "__shfl_xor_sync(0xffffffffu, v, o)",
    "return g >= 0x1p-32f",
    "if (a->rows > 0x7ff) return",
    "// DRAM at 88% of its peak",
    "every 2 s, 5 samples, 10 ms of budget in the comment",
    "PASS  mse  not a multiple of the block    (100003,)",
])
def test_what_does_not_vary_is_kept(text):
    assert sanitize(text) == text


def compared_outputs():
    """The text of every stored output that nbval compares (cells not nbval-ignore-output)."""
    for path in sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]):
        for cell in nbformat.read(path, as_version=4).cells:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell.cell_type != "code" or {"nbval-ignore-output", "nbval-skip"} & set(tags):
                continue
            for output in cell.get("outputs", []):
                yield path, output.get("text") or output.get("data", {}).get("text/plain", "")


def test_a_stored_compared_output_has_only_listings_in_its_masked_times():
    """Timing cells are nbval-ignore-output, so in a compared output a time or percent mask can
    only touch a build line; the labels above are what the timing cells print, kept masked in
    case one is compared."""
    masked = [(path.name, text) for path, text in compared_outputs()
              if sanitize(text) != text and "BUILD" not in sanitize(text)
              and "0xADDRESS" not in sanitize(text)]
    assert all("//" in text or "#include" in text for _, text in masked), masked[:3]
