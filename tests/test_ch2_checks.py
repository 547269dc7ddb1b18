"""Exercise 2.1's source check: the early-return trap fails, the solution and skeleton pass."""

from pathlib import Path

import pytest

from kernels.build import skeletons
from kernels.exercises.ch2_checks import (every_lane_reaches_the_shuffles,
                                          lanes_leaving_before_a_shuffle)

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = (ROOT / "solutions/kernels/ch2_warp_atomics.cu").read_text()
SKELETON = (ROOT / "kernels/exercises/ch2_warp_atomics.cu").read_text()
GUARDED = "float v = i < a.n ? loss(a.pred[i], a.target[i % a.target_len]) : 0.0f;"


def early_return_version():
    """The solution with the skeleton's early return kept: the trap of exercise 2.1."""
    assert GUARDED in SOLUTION
    return SOLUTION.replace(GUARDED, "if (i >= a.n) return;\n    "
                            "float v = loss(a.pred[i], a.target[i % a.target_len]);")


def test_the_early_return_trap_is_found():
    assert lanes_leaving_before_a_shuffle(early_return_version()) == ["squared_error_warp_atomic"]


def test_the_solution_and_the_skeleton_pass():
    assert lanes_leaving_before_a_shuffle(SOLUTION) == []
    if skeletons.attempted(ROOT / "kernels/exercises/ch2_warp_atomics.cu"):
        pytest.skip("kernels/exercises/ch2_warp_atomics.cu is your exercise in progress")
    assert lanes_leaving_before_a_shuffle(SKELETON) == []  # no shuffle yet


def test_a_return_after_the_shuffles_or_in_a_comment_is_fine():
    text = """__global__ void k(float* out) {
        // return early? no: every lane must reach the shuffle
        float v = 1.0f;
        v += __shfl_down_sync(0xffffffffu, v, 16);
        if (threadIdx.x % 32) return;
        *out = v;
    }"""
    assert lanes_leaving_before_a_shuffle(text) == []


def test_the_verdict_names_the_kernel(tmp_path, capsys):
    trap = tmp_path / "trap.cu"
    trap.write_text(early_return_version())
    assert not every_lane_reaches_the_shuffles(trap)
    assert capsys.readouterr().out.startswith("FAIL  squared_error_warp_atomic: a `return`")
    assert every_lane_reaches_the_shuffles(ROOT / "solutions/kernels/ch2_warp_atomics.cu")
