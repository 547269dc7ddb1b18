"""bench/llm_cross_entropy_targets.py on the CPU: the LM head's target ratio is the median of the
turns' own ratios, each turn's course step over the compile step timed beside it."""

import importlib.util
from pathlib import Path

import pytest

from kernels import bench

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("llm_targets",
                                              ROOT / "bench" / "llm_cross_entropy_targets.py")
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def test_the_heads_ratio_pairs_each_turns_two_steps(monkeypatch):
    timed = {}

    def fake_in_turns(fns, arg_sets, turns, reps):
        timed.update(names=list(fns), arg_sets=arg_sets, turns=turns)
        # course / compile per turn: 1.10, 0.90, 1.00, 1.20, 0.95 (median 1.00); the medians of
        # the times alone would give 1.05 / 1.00
        return {targets.COURSE_HEAD: [1.10, 0.90, 1.05, 1.20, 0.95],
                "compile": [1.00, 1.00, 1.05, 1.00, 1.00]}

    monkeypatch.setattr(bench, "in_turns", fake_in_turns)
    providers = {targets.COURSE_HEAD: lambda *a: None, "compile": lambda *a: None,
                 "eager": lambda *a: None}
    ratio = targets.head_ratio_in_turns(providers, ("h", "w", "t"))
    assert ratio == pytest.approx(1.0)
    assert timed == {"names": [targets.COURSE_HEAD, "compile"], "arg_sets": [("h", "w", "t")],
                     "turns": targets.HEAD_TURNS}
