"""bench/v5_ablation.py --shapes: copies of version 5 with other values of its constants."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("v5_ablation", ROOT / "bench" / "v5_ablation.py")
v5_ablation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v5_ablation)


def test_a_copy_changes_exactly_the_constants_it_names():
    text = v5_ablation.SOURCE.read_text()
    copy = v5_ablation.with_constants(text, {"kThreads": 256, "kMinTile": 2048})
    changed = [(a, b) for a, b in zip(text.splitlines(), copy.splitlines()) if a != b]
    assert [b.split("//")[0].strip() for _, b in changed] == [
        "constexpr int kThreads = 256;", "constexpr int64_t kMinTile = 2048;"]


def test_every_shape_names_constants_the_file_defines_and_an_unknown_one_raises():
    text = v5_ablation.SOURCE.read_text()
    for change in v5_ablation.SHAPES.values():
        v5_ablation.with_constants(text, change)
    with pytest.raises(ValueError, match="kNoSuchConstant: 0 definitions"):
        v5_ablation.with_constants(text, {"kNoSuchConstant": 1})


def test_every_single_block_still_reads_its_whole_input():
    """The straight-line single block reads threads x loads x 4 elements, no more: a copy that
    covered less than kOneBlockMax would skip elements."""
    import re

    text = v5_ablation.SOURCE.read_text().replace("1 << 14", "16384")
    constant = {name: int(value)
                for name, value in re.findall(r"constexpr \w+ (kOneBlock\w+) = ([^;]+);", text)}
    for label, change in v5_ablation.SHAPES.items():
        values = {**constant, **change}
        covered = values["kOneBlockThreads"] * values["kOneBlockUnroll"] * 4
        assert covered == values["kOneBlockMax"], label
