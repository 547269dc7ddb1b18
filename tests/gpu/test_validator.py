"""The validator catches typical bugs, and passes every solution.

- Each kernel in tests/fixtures/wrong_answers/ has one typical bug (its header says which);
  ``kernels.check`` must raise CheckFailed naming the case and what it expected and got.
  One more wrong answer is in Python: a correct kernel whose result is reshaped to [1] instead of
  PyTorch's 0-d (a binding returning at::empty({1})).
- Every kernel file under solutions/ passes the check suite of the loss each op computes, or,
  for a loss that is not one of the course's four (chapter 6's log-cosh), its exercise's check.
"""

import importlib
from pathlib import Path

import pytest

from gpu_support import ROOT, loss_of, ops_of, record, version

pytestmark = pytest.mark.gpu

from kernels import correctness  # noqa: E402
from kernels.losses import get_loss  # noqa: E402

WRONG = sorted((ROOT / "tests" / "fixtures" / "wrong_answers").glob("*.cu"))
SOLUTIONS = sorted((ROOT / "solutions").glob("**/*.cu"))
CORRECT = "ch4_two_pass/v2_deterministic_tiles.cu"  # the kernel the Python wrong answer wraps
# Solutions of exercises that add a new loss: (module, check function) of the exercise.
# ch6_log_cosh_fp64.cu is exercise 6.1's answer in float64: right, and too slow for its target.
EXERCISE_CHECKS = {name: ("kernels.exercises.ch6_checks", "check_log_cosh")
                   for name in ("ch6_log_cosh.cu", "ch6_log_cosh_fp64.cu")}


def ops_and_losses(path: Path):
    found = []
    for op in ops_of(path):
        loss = "cross_entropy" if op == "cross_entropy" else loss_of(op)
        if loss is not None:
            found.append((op, loss))
    return found


def callable_for(kernel, op):
    """What check() calls: the op itself, or the cross-entropy wrapper around the kernel's ops."""
    if op == "cross_entropy":
        from kernels.cross_entropy import cross_entropy

        return lambda logits, target, **kw: cross_entropy(logits, target, kernel=kernel, **kw)
    return getattr(kernel, op)


def assert_rejected(fn, loss, name):
    with pytest.raises(correctness.CheckFailed) as failure:
        correctness.check(fn, loss)
    message = str(failure.value)
    labels = [label for label, _ in get_loss(loss).check_shapes]
    assert message.startswith(f"FAIL {loss}, "), message
    assert any(label in message for label in labels), f"no case named in: {message}"
    assert ("expected" in message and "got" in message) or "PyTorch returns" in message, message
    record(name, "validator", "rejected", cases=len(labels), message=message)


@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.name)
def test_wrong_answer_is_rejected(path):
    from kernels import load

    kernel = load(path)
    cases = ops_and_losses(path)
    assert cases, f"{path.name} defines no loss op"
    for op, loss in cases:
        assert_rejected(callable_for(kernel, op), loss, version(path))


def test_shape_1_instead_of_0d_is_rejected():
    from kernels import load

    kernel = load(CORRECT)
    correctness.check(kernel.mse, "mse")  # the kernel itself is right

    def returns_shape_1(pred, target):
        return kernel.mse(pred, target).reshape(1)

    assert_rejected(returns_shape_1, "mse", "python:shape [1] instead of 0-d")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_solution_passes(path):
    from kernels import load

    kernel = load(path)
    if path.name in EXERCISE_CHECKS:
        module, name = EXERCISE_CHECKS[path.name]
        assert getattr(importlib.import_module(module), name)(kernel), f"{name} failed"
        record(version(path), "validator", "pass", cases=1)
        return
    cases = ops_and_losses(path)
    assert cases, f"{path.name} defines no loss op"
    for op, loss in cases:
        correctness.check(callable_for(kernel, op), loss)
    record(version(path), "validator", "pass", cases=len(cases))


def test_nan_dropping_smooth_l1_fails_only_the_special_values():
    """A Smooth L1 written with fmaxf turns a NaN into 0.5: the random-input suite cannot see
    it, the NaN/infinity cases that chapter 3's exercise runs must."""
    from kernels import load

    kernel = load(ROOT / "tests" / "fixtures" / "drops_nan" / "smooth_l1_fmaxf.cu")
    correctness.check(kernel.smooth_l1, "smooth_l1")  # finite inputs: right
    with pytest.raises(correctness.CheckFailed, match="NaN"):
        correctness.check(kernel.smooth_l1, "smooth_l1", special_values=True)
    solution = load(ROOT / "solutions" / "kernels" / "ch3_smooth_l1.cu")
    correctness.check(solution.smooth_l1, "smooth_l1", special_values=True)


# --- chapter 9's validator, the opt-in evaluate_trusted (chapter 9 itself still runs evaluate and
# evaluate_isolated with their defaults): programs that reach its references, or behave until timed

KB_MID = {"batch_size": 8192, "dim": 8192}  # problem 94 at a sixteenth of KernelBench's size
KB_FAST = {"exact_inputs": False, "perf_trials": 10}


def _kb():
    from kernels import kernelbench

    return kernelbench


def test_a_program_that_slows_the_reference_gains_only_in_one_process():
    """In one process (KernelBench's design) the slowed torch.mean slows the eager reference and
    the program shows a speed-up it did not earn; isolated, eager is timed here, the speed-up is
    the program's own, and the check meant for it fails."""
    kb = _kb()
    problem = kb.PROBLEMS[94].resized(**KB_MID)
    model, check = kb.TRUSTED_ONLY["slows the reference"]
    with kb.restoring_torch():
        shared = kb.evaluate(problem, model, entry="slows the reference", **KB_FAST)
    assert shared.passed, shared.verdict
    isolated = kb.evaluate_trusted(problem, f"{model.__module__}:{model.__name__}",
                                    entry="slows the reference", **KB_FAST)
    failed = [c.split(" (")[0] for c, _ in isolated.failures]
    assert not isolated.passed and check in failed and isolated.kernelbench_passed, isolated.verdict
    assert shared.speedup("eager") > 1.5 * isolated.speedup("eager"), (shared.verdict, isolated.verdict)
    record("kernelbench:slows the reference", "validator", "rejected", message=isolated.verdict)


def test_a_program_that_changes_the_reference_fails_coverage_isolated():
    kb = _kb()
    model, check = kb.TRUSTED_ONLY["changes the reference's answer"]
    isolated = kb.evaluate_trusted(94, f"{model.__module__}:{model.__name__}",
                                    entry="changes the reference", **KB_FAST)
    failed = [c.split(" (")[0] for c, _ in isolated.failures]
    assert not isolated.passed and check in failed, isolated.verdict
    record("kernelbench:changes the reference", "validator", "rejected", message=isolated.verdict)


@pytest.mark.parametrize("isolated", [False, True], ids=["one process", "isolated"])
def test_honest_until_timed_fails_its_timed_calls_at_kernelbench_size(isolated):
    """Exercise 9.2's answer at 32768 x 32768: KernelBench's rules pass it, and so did the timed
    calls' old check on i.i.d. inputs; each timed call's secret positions do not."""
    kb = _kb()
    cheat = kb.trusted_cheats(94)["honest until timed"]
    run = kb.evaluate_trusted if isolated else kb.evaluate
    options = {"trusted": True} if not isolated else {}  # in one process: the opt-in timing too
    result = run(94, cheat if isolated else cheat.model, entry="honest until timed", **KB_FAST,
                 **options)
    failed = [c.split(" (")[0] for c, _ in result.failures]
    assert result.kernelbench_passed and failed == ["fresh inputs"], result.verdict
    record("kernelbench:honest until timed", "validator", "rejected", message=result.verdict)


@pytest.mark.parametrize("problem_id", [94, 95, 96, 100])
def test_course_entries_pass_isolated_with_every_timed_call_checked(problem_id):
    kb = _kb()
    sizes = {95: {"batch_size": 16384, "num_classes": 4096}}.get(problem_id, KB_MID)
    result = kb.evaluate_trusted(kb.PROBLEMS[problem_id].resized(**sizes),
                                  kb.COURSE_ENTRIES[problem_id], entry="course", **KB_FAST)
    assert result.passed, result.verdict
    assert set(result.timings) == {"ModelNew", "eager", "torch.compile"}
    assert result.timings["ModelNew"].failure is None and result.gpu_only["ModelNew"] > 0
