"""Chapter 1's exercise checks: not attempted, right, and wrong (which raises, without the answer)."""

import pytest

from kernels.course.chapter import ExerciseFailed
from kernels.exercises import ch1_checks

GIB = 1 << 30


def test_an_answer_still_none_is_not_attempted(capsys):
    assert ch1_checks.check_smooth_l1_bytes(None) is None
    assert capsys.readouterr().out.startswith("not attempted: bytes moved by eager Smooth L1")


def test_the_right_answer_passes(capsys):
    ch1_checks.check_smooth_l1_bytes(16 * GIB)
    assert capsys.readouterr().out == "PASS: bytes moved by eager Smooth L1 at 2^30 elements\n"


@pytest.mark.parametrize("answer, says", [(12 * GIB, "25% too low"), (20 * GIB, "25% too high"),
                                          (-16 * GIB, "of the wrong sign"), ("16 GiB", "a number")])
def test_a_wrong_answer_fails_without_giving_the_answer(answer, says, capsys):
    with pytest.raises(ExerciseFailed, match=says) as failure:
        ch1_checks.check_smooth_l1_bytes(answer)
    printed = capsys.readouterr().out
    assert printed.startswith("FAIL: bytes moved by eager Smooth L1") and says in printed
    assert str(16 * GIB) not in printed + str(failure.value)


def test_the_model_is_checked_against_the_measured_rows(capsys):
    rows = [{"loss": "mse", "provider": "eager", "shape": [n], "ms": n * 1e-6}
            for n in ch1_checks.MODEL_SIZES]
    ch1_checks.check_mse_model(24, lambda n: n * 1.1e-6, rows)  # within 20% at both sizes
    assert capsys.readouterr().out.count("PASS") == 3
    with pytest.raises(ExerciseFailed, match="model of eager MSE at 2\\^20"):
        ch1_checks.check_mse_model(24, lambda n: n * 2e-6, rows)


def test_the_roofline_uses_the_bytes_that_must_be_read(capsys):
    must_read = 32768 * 4096 * 4 + 32768 * 8
    ch1_checks.check_ce_roofline(4 * 32768 * 4096 / must_read, must_read / 3000 / 1e6, 3000)
    assert capsys.readouterr().out.count("PASS") == 2
