"""Every kernel exercise: its skeleton as shipped fails its check, and its solution passes it;
handed in as a learner's attempt, the skeleton's code raises with its failing case.

The checks are the chapters' own (``Chapter.exercise`` with the same check the chapter's cell
passes), so a skeleton that a learner could hand in untouched, or a solution that no longer
passes, fails here. A skeleton the learner has edited is theirs: its half is skipped.
"""

import pytest

from gpu_support import ROOT

pytestmark = pytest.mark.gpu

from kernels import Chapter, check  # noqa: E402
from kernels.build import skeletons  # noqa: E402
from kernels.build.skeletons import attempted  # noqa: E402
from kernels.course.chapter import ExerciseFailed  # noqa: E402
from kernels.exercises.ch2_checks import check_warp_atomics  # noqa: E402
from kernels.exercises.ch4_checks import check_kahan  # noqa: E402
from kernels.exercises.ch5_checks import (check_ignore_index, check_label_smoothing,  # noqa: E402
                                          check_online_softmax)
from kernels.exercises.ch6_checks import check_log_cosh  # noqa: E402
from kernels.exercises.ch7_checks import check_split_rows  # noqa: E402

SOLUTIONS = ROOT / "solutions" / "kernels"


def mse(path):
    return lambda kernel: check(kernel.mse, "mse")


# exercise file (under kernels/exercises/ and solutions/kernels/) -> its check, made for a source
EXERCISES = {
    "ch2_warp_atomics.cu": check_warp_atomics,  # the values, then the shuffle rule
    "ch2_race.cu": mse,
    "ch3_smooth_l1.cu": lambda path: (
        lambda kernel: check(kernel.smooth_l1, "smooth_l1", special_values=True)),
    "ch3_broken_reduction.cu": mse,
    "ch3_padded_tree.cu": mse,
    "ch4_kahan.cu": lambda path: check_kahan,
    "ch4_last_block.cu": mse,
    "ch5_ignore_index.cu": lambda path: check_ignore_index,
    "ch5_online_softmax.cu": lambda path: check_online_softmax,
    "ch5_label_smoothing.cu": lambda path: check_label_smoothing,
    "ch6_log_cosh.cu": lambda path: check_log_cosh,
    "ch7_split_rows.cu": lambda path: check_split_rows,
}


def test_every_kernel_exercise_is_listed():
    shipped = {p.name for p in (ROOT / "kernels" / "exercises").glob("*.cu")}
    assert shipped == set(EXERCISES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_solution_passes_its_check(name):
    solution = str(SOLUTIONS / name)
    assert Chapter("test").exercise(solution, EXERCISES[name](solution)) is True


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_skeleton_as_shipped_fails_its_check(name):
    skeleton = f"exercises/{name}"
    if attempted(skeleton):
        pytest.skip(f"kernels/{skeleton} is your attempt, not the skeleton as shipped")
    assert Chapter("test").exercise(skeleton, EXERCISES[name](skeleton)) is False


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_wrong_attempt_raises_with_its_failing_case(name, monkeypatch):
    """The learner's loop on the GPU: code that fails its check, counted as the learner's edit,
    raises (so ``pytest --nbval`` and ``make check`` fail) with the first failing case."""
    skeleton = f"exercises/{name}"
    monkeypatch.setattr(skeletons, "attempted", lambda path: True)
    with pytest.raises(ExerciseFailed, match=rf"^{skeleton}: \S") as failure:
        Chapter("test").exercise(skeleton, EXERCISES[name](skeleton))
    assert "FAIL" in str(failure.value) or "rror" in str(failure.value), str(failure.value)


def test_exercise_2_1_fails_right_sums_with_an_early_return(tmp_path, capsys):
    """Built and run on the GPU: the solution with the skeleton's early return gives the right
    sums (every value case PASSes) but breaks the shuffle rule, so the exercise FAILs."""
    solution = (SOLUTIONS / "ch2_warp_atomics.cu").read_text()
    guarded = "float v = i < a.n ? loss(a.pred[i], a.target[i % a.target_len]) : 0.0f;"
    assert guarded in solution
    early = tmp_path / "ch2_warp_atomics.cu"
    early.write_text(solution.replace(guarded, "if (i >= a.n) return;\n    float v = "
                                               "loss(a.pred[i], a.target[i % a.target_len]);"))
    assert Chapter("test").exercise(str(early), check_warp_atomics(str(early))) is False
    out = capsys.readouterr().out
    # Lanes that left before a full-mask shuffle are undefined behaviour: the sums may still come
    # out right (then the rule must be what fails) or not (then a value case fails first).
    if "FAIL  mse" not in out:
        assert "FAIL  squared_error_warp_atomic: a `return`" in out, out
