"""KernelBench's loss problems on the GPU (kernels/kernelbench/): the course's entries pass all
four at KernelBench's sizes, under its rules and every check; each cheat fails the check meant
for it, including work hidden on a side stream and a result replayed in the timed calls, which only
a GPU shows; a subsample passes KernelBench's own rules at its size and fails the coverage trials;
an isolated run survives a device-side assert.

The inputs are drawn on the GPU (KernelBench's distributions, other values: seconds instead of a
minute of CPU time per problem), and timed over 10 trials; chapter 9 runs KernelBench's exact
inputs and 100 trials. No timing is asserted: the speed-ups are measured by the chapter.
"""

import pytest

import gpu_support  # noqa: F401  (puts the repository on sys.path, sets CUDA_HOME like the others)

pytestmark = pytest.mark.gpu

from kernels import kernelbench as kb  # noqa: E402

FAST = {"exact_inputs": False, "perf_trials": 10}
# Big enough that the side stream's hidden work (about 0.2 ms at 3 TB/s) is well above the
# check's 50 us, small enough to run in seconds.
MID = {94: {"batch_size": 8192, "dim": 8192}, 95: {"batch_size": 16384, "num_classes": 4096},
       96: {"batch_size": 8192, "dim": 8192}, 100: {"batch_size": 8192, "dim": 8192}}


def failed_checks(result):
    return [check.split(" (")[0] for check, _ in result.failures]


@pytest.mark.parametrize("problem_id", sorted(kb.PROBLEMS))
def test_course_entry_passes_at_kernelbench_size(problem_id):
    result = kb.evaluate(problem_id, kb.COURSE_ENTRIES[problem_id], entry="course", **FAST)
    assert result.passed, result.verdict
    assert result.trials_passed == 5 and set(result.timings) == {"ModelNew", "eager", "torch.compile"}
    assert all(t.mean > 0 for t in result.timings.values())


def test_exact_inputs_on_the_gpu():
    """KernelBench's own input values (drawn on the CPU, then moved): problem 95, the smallest."""
    result = kb.evaluate(95, kb.COURSE_ENTRIES[95], entry="course", perf_trials=5)
    assert result.passed, result.verdict


GPU_CHEATS = [(pid, name) for pid in sorted(kb.PROBLEMS) for name in kb.cheats(pid)]


@pytest.mark.parametrize("problem_id, name", GPU_CHEATS, ids=[f"{p}-{n}" for p, n in GPU_CHEATS])
def test_each_cheat_fails_the_check_meant_for_it(problem_id, name):
    cheat = kb.cheats(problem_id)[name]
    problem = kb.PROBLEMS[problem_id].resized(**MID[problem_id])
    result = kb.evaluate(problem, cheat.model, entry=name, **FAST)
    assert not result.passed and cheat.check in failed_checks(result), result.verdict
    if cheat.kernelbench_accepts is not None:
        assert result.kernelbench_passed == cheat.kernelbench_accepts, result.verdict


def test_side_stream_is_what_event_timing_alone_believes():
    """The side-stream cheat looks much faster than eager to CUDA events alone (KernelBench's
    timing): the wall clock with a device-wide synchronisation shows the work."""
    problem = kb.PROBLEMS[94].resized(**MID[94])
    result = kb.evaluate(problem, kb.cheats(94)["work on a side stream"].model, **FAST)
    timing, eager = result.timings["ModelNew"], result.timings["eager"]
    assert timing.median < 0.5 * eager.median  # what the events saw: a 2x 'speed-up' or more
    assert timing.hidden_ms - eager.hidden_ms > 0.5 * eager.median  # what the device did


def test_honest_pytorch_model_new_passes_the_dynamic_checks():
    """No false alarm: the reference itself, as a ModelNew, on every problem at mid size, timed on
    fresh inputs (the static checks, which flag PyTorch's own expression, left out)."""
    for problem_id in sorted(kb.PROBLEMS):
        problem = kb.PROBLEMS[problem_id].resized(**MID[problem_id])
        result = kb.evaluate(problem, problem.model, entry="reference", static_checks=False, **FAST)
        assert result.passed, result.verdict
        assert result.timings["ModelNew"].failure is None and result.gpu_only["ModelNew"] > 0


@pytest.mark.parametrize("problem_id", [94, 96, 100])
@pytest.mark.parametrize("name", ["every other row (and fourth column)", "a random half of the rows"])
def test_a_subsample_passes_kernelbench_at_its_size_and_fails_coverage(problem_id, name):
    """What the validator used to let through: the mean of a regular (or random) subsample is within
    1e-4 of the whole mean on KernelBench's i.i.d. inputs of 2^30 values."""
    result = kb.evaluate(problem_id, kb.cheats(problem_id)[name].model, entry=name,
                         exact_inputs=False, measure=False)
    assert result.kernelbench_passed, result.verdict
    assert "coverage" in failed_checks(result), result.verdict


def test_the_exercise_solution_passes_isolated_and_the_skeleton_is_rejected():
    solution = kb.evaluate_isolated(100, "solutions/kernels/ch9_model_new.py", entry="solution",
                                    exact_inputs=False, perf_trials=10)
    assert solution.passed, solution.verdict
    skeleton = kb.evaluate_isolated(100, "kernels/exercises/ch9_model_new.py", entry="skeleton",
                                    exact_inputs=False, measure=False)
    assert failed_checks(skeleton) == ["static"] and "PyTorch's `mean`" in skeleton.reason


def test_a_device_side_assert_is_a_fail_with_the_reason_not_a_dead_process():
    result = kb.evaluate_isolated(kb.PROBLEMS[94].resized(**MID[94]), "kernels.kernelbench.cheats:DeviceAssert",
                                  exact_inputs=False, measure=False)
    assert not result.passed and "device-side assert" in result.reason, result.verdict
