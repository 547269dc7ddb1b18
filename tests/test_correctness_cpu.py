"""kernels.check and its cases on CPU: stand-in ops that are right, and ops that are wrong in
the ways a kernel is (a wrong value, NaN, a wrong shape or dtype, a dropped NaN), each must fail.

The inputs are made on the CPU (``device="cpu"``); the check's logic is the one the GPU runs.
Exercise 2.1's whole check is here too: a kernel with the right sums that returns before its
shuffles must FAIL (the rule half of the check once never ran: ``check`` returned None).
"""

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernels.exercises.ch2_checks import check_warp_atomics
from kernels.losses import get_loss
from kernels.measure import correctness
from kernels.measure.correctness import (SPECIAL_VALUES, CheckFailed, Checked, check, check_case,
                                         check_special_value)

ROOT = Path(__file__).resolve().parents[1]
SMALL = [("1 element", (1,)), ("below one block", (100,)), ("odd", (3_001,))]


def exact(loss_name):
    """The loss in float64, rounded once to float32: the best a float32 kernel can return."""
    loss = get_loss(loss_name)
    return lambda *inputs, **kwargs: loss.reference64(inputs, **kwargs).float()


def case(op, loss_name="mse", shape=(3_001,), rtol=1e-5, **kwargs):
    return check_case(op, loss_name, "a case", shape, rtol, device="cpu", **kwargs)


@pytest.mark.parametrize("loss_name", ["mse", "smooth_l1", "hinge", "bce_with_logits"])
def test_the_float64_answer_rounded_to_float32_passes(loss_name):
    shape = (3, 100) if loss_name == "hinge" else (3_001,)
    assert case(exact(loss_name), loss_name, shape).startswith(f"PASS  {loss_name}")


def test_a_wrong_value_fails_with_expected_and_got():
    loss = get_loss("mse")
    expected = loss.reference64(loss.make_inputs((3_001,), torch.Generator().manual_seed(
        correctness.SEED), "cpu", None)).item()
    off = lambda p, t: exact("mse")(p, t) * (1 + 3e-5)  # noqa: E731
    with pytest.raises(CheckFailed, match=rf"FAIL mse, a case \(3001,\): expected "
                                          rf"{expected:.9g}, got .* > 1e-05\)"):
        case(off)
    assert case(off, rtol=1e-4).startswith("PASS")  # the same error within a looser tolerance


def test_nan_never_passes_even_at_a_tolerance_of_100_percent():
    with pytest.raises(CheckFailed, match="got nan"):
        case(lambda p, t: torch.tensor(math.nan), rtol=1.0)


@pytest.mark.parametrize("op, message", [
    (lambda p, t: exact("mse")(p, t).reshape(1), r"returned shape \(1,\) \(PyTorch returns \(\)\)"),
    (lambda p, t: exact("mse")(p, t).double(), "returned dtype torch.float64"),
    (lambda p, t: exact("mse")(p, t).item(), "returned float, not a tensor"),
])
def test_a_wrong_shape_dtype_or_type_fails(op, message):
    with pytest.raises(CheckFailed, match=message):
        case(op)


def test_a_float16_answer_fails_the_float32_tolerance():
    with pytest.raises(CheckFailed, match="relative error"):
        case(lambda p, t: exact("mse")(p, t).half().float())


def test_the_value_is_compared_with_the_float64_reference(monkeypatch):
    """The float32 reference gives the shape and dtype only: were it the value compared, a
    float32 PyTorch that rounds differently from the float64 answer would set the bar."""
    mse = get_loss("mse")
    wrong32 = replace(mse, reference=lambda p, t: mse.reference(p, t) * 2
                      if p.dtype == torch.float32 else mse.reference(p, t))
    monkeypatch.setattr(correctness, "get_loss", lambda name: wrong32)
    assert case(exact("mse")).startswith("PASS")
    with pytest.raises(CheckFailed):
        case(lambda p, t: mse.reference(p, t) * 2)


def test_keyword_arguments_reach_the_op_and_the_reference():
    seen = []

    def op(logits, target, label_smoothing):
        seen.append(label_smoothing)
        return exact("cross_entropy")(logits, target, label_smoothing=label_smoothing)

    def ignores_it(logits, target, label_smoothing):
        return exact("cross_entropy")(logits, target)

    shape = (33, 10)
    assert case(op, "cross_entropy", shape, label_smoothing=0.1).startswith("PASS")
    assert seen == [0.1]
    with pytest.raises(CheckFailed):  # the reference smooths the labels: the op does not
        case(ignores_it, "cross_entropy", shape, label_smoothing=0.1)


# --- special values ---------------------------------------------------------------------------

def special(op, loss_name="mse", which=0, value=math.nan):
    return check_special_value(op, loss_name, "a special value", which, value, device="cpu")


@pytest.mark.parametrize("label, which, value", SPECIAL_VALUES)
def test_pytorchs_answer_passes_every_special_value(label, which, value):
    assert special(exact("mse"), "mse", which, value).startswith("PASS  mse")


def test_a_dropped_nan_fails():
    dropped = lambda p, t: exact("mse")(p.nan_to_num(0.0), t.nan_to_num(0.0))  # noqa: E731
    with pytest.raises(CheckFailed, match="PyTorch gives nan"):
        special(dropped, which=1)


def test_an_infinity_must_be_the_same_infinity():
    with pytest.raises(CheckFailed, match="PyTorch gives inf, got -inf"):
        special(lambda p, t: torch.tensor(-math.inf), value=math.inf)
    with pytest.raises(CheckFailed, match="PyTorch gives inf, got nan"):
        special(lambda p, t: torch.tensor(math.nan), value=math.inf)


def test_a_finite_answer_is_compared_in_float64():
    """A replaced element PyTorch keeps finite (1e3) goes through the float64 comparison."""
    assert special(exact("mse"), value=1e3).startswith("PASS")
    with pytest.raises(CheckFailed, match="PyTorch gives"):
        special(lambda p, t: exact("mse")(p, t) * (1 + 1e-4), value=1e3)


# --- check: the suite, and what it returns ----------------------------------------------------

def test_check_returns_the_number_of_cases_passed(capsys):
    result = check(exact("mse"), "mse", shapes=SMALL, device="cpu")
    assert result == 3 and isinstance(result, Checked)
    assert len(capsys.readouterr().out.splitlines()) == 3
    result = check(exact("mse"), "mse", shapes=SMALL, special_values=True, device="cpu")
    assert result == 3 + len(SPECIAL_VALUES)


def test_check_runs_the_whole_default_suite(capsys):
    assert check(exact("mse"), "mse", device="cpu") == len(get_loss("mse").check_shapes)


def test_check_stops_at_the_first_failure(capsys):
    calls = []

    def op(p, t):
        calls.append(p.numel())
        return exact("mse")(p, t) if p.numel() < 100 else torch.tensor(0.0)

    with pytest.raises(CheckFailed, match="below one block"):
        check(op, "mse", shapes=SMALL, device="cpu")
    assert calls == [1, 100]


def test_an_empty_suite_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="no cases"):
        check(exact("mse"), "mse", shapes=[], device="cpu")


def test_checked_is_shown_as_nothing_in_a_notebook():
    """A cell ending in check(...) keeps its stored output: IPython shows no bare number."""
    from IPython.core.formatters import DisplayFormatter

    assert DisplayFormatter().format(Checked(6)) == ({}, {})
    assert DisplayFormatter().format(6)[0] == {"text/plain": "6"}


# --- exercise 2.1: the values and the shuffle rule --------------------------------------------

SOLUTION = (ROOT / "solutions/kernels/ch2_warp_atomics.cu").read_text()
GUARDED = "float v = i < a.n ? loss(a.pred[i], a.target[i % a.target_len]) : 0.0f;"


class RightSums:
    """A built kernel whose mse gives the right value on every case (a stand-in for the GPU)."""
    mse = staticmethod(exact("mse"))


class WrongSums:
    mse = staticmethod(lambda p, t: exact("mse")(p, t) * 0.5)


@pytest.fixture
def early_return(tmp_path):
    """The solution with the skeleton's early return kept: right sums, broken shuffle rule."""
    assert GUARDED in SOLUTION
    path = tmp_path / "ch2_warp_atomics.cu"
    path.write_text(SOLUTION.replace(GUARDED, "if (i >= a.n) return;\n    float v = "
                                              "loss(a.pred[i], a.target[i % a.target_len]);"))
    return path


def test_exercise_2_1_right_sums_and_the_rule_kept_pass(capsys):
    source = ROOT / "solutions/kernels/ch2_warp_atomics.cu"
    assert check_warp_atomics(source, device="cpu")(RightSums()) is True
    assert capsys.readouterr().out.splitlines()[-1].startswith("PASS  every lane reaches")


def test_exercise_2_1_right_sums_but_an_early_return_fails(early_return, capsys):
    assert check_warp_atomics(early_return, device="cpu")(RightSums()) is False
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("PASS  mse") for line in out) == len(get_loss("mse").check_shapes)
    assert out[-1].startswith("FAIL  squared_error_warp_atomic: a `return`")


def test_exercise_2_1_through_chapter_exercise_fails(early_return, monkeypatch, capsys):
    """The verdict a learner sees: Chapter.exercise with the chapter's check says FAIL."""
    from kernels import Chapter
    from kernels.build import loader, skeletons

    monkeypatch.setattr(loader, "load", lambda source: RightSums())
    monkeypatch.setattr(skeletons, "attempted", lambda path: False)
    assert Chapter("ch2").exercise(str(early_return),
                                   check_warp_atomics(early_return, device="cpu")) is False
    assert "a case above FAILs" in capsys.readouterr().out.splitlines()[-1]


def test_exercise_2_1_wrong_sums_fail_before_the_rule(capsys):
    source = ROOT / "solutions/kernels/ch2_warp_atomics.cu"
    with pytest.raises(CheckFailed):
        check_warp_atomics(source, device="cpu")(WrongSums())
    assert "every lane" not in capsys.readouterr().out


# --- what the mutation run found untested (tools/mutation_survivors.md) ----------------------

def test_the_dtype_reaches_the_inputs_through_check():
    seen = []

    def op(p, t):
        seen.append(p.dtype)
        return get_loss("mse").reference64((p, t)).to(p.dtype)

    assert check(op, "mse", shapes=SMALL, dtype=torch.float64, device="cpu") == 3
    assert seen == [torch.float64] * 3
    assert case(op, dtype=torch.float64).startswith("PASS") and seen[-1] == torch.float64


def test_keyword_arguments_reach_the_op_through_check():
    seen = []

    def op(logits, target, label_smoothing):
        seen.append(label_smoothing)
        return exact("cross_entropy")(logits, target, label_smoothing=label_smoothing)

    shapes = [("few classes", (33, 10))]
    assert check(op, "cross_entropy", shapes=shapes, device="cpu", label_smoothing=0.1) == 1
    assert seen == [0.1]


def test_check_prints_a_pass_line_per_case_special_values_included(capsys):
    check(exact("mse"), "mse", shapes=SMALL[:1], special_values=True, device="cpu")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(SPECIAL_VALUES)
    assert [line.split()[:2] for line in lines] == [["PASS", "mse"]] * len(lines)
    assert lines[1].endswith("-> nan") and lines[3].endswith("-> inf")


def test_the_empty_suite_message():
    with pytest.raises(ValueError, match=r"^check\(\) was given no cases: an empty suite would "
                                         r"pass anything$"):
        check(exact("mse"), "mse", shapes=[], device="cpu")


def test_a_special_value_failure_names_the_loss_and_the_case():
    with pytest.raises(CheckFailed, match=r"^FAIL mse, a special value: PyTorch gives nan, got 0"):
        special(lambda p, t: torch.tensor(0.0))


def test_an_error_equal_to_the_tolerance_passes():
    """``<=``: a tolerance of exactly the op's error passes, as documented (not ``<``)."""
    loss = get_loss("mse")
    op = lambda p, t: exact("mse")(p, t) * (1 + 2 ** -10)  # noqa: E731
    inputs = loss.make_inputs((3_001,), torch.Generator().manual_seed(correctness.SEED), "cpu",
                              None)
    error = correctness.relative_error(op(*inputs), loss.reference64(inputs))
    assert error > 0 and case(op, rtol=error).startswith("PASS")
    with pytest.raises(CheckFailed):
        case(op, rtol=error * (1 - 1e-9))
