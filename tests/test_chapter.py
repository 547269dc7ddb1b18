"""kernels.course.chapter.Chapter on CPU: the rows it writes and reads, its exercises' verdicts.

The GPU's name and bandwidths are monkeypatched, the results folder is a temporary one, and the
exercises' builds are stand-ins (a kernel object, or the errors a build and a check raise).
"""

import csv

import pytest
import torch

from kernels import Chapter, CheckFailed, KernelBuildError, bench, results
from kernels.build import loader, skeletons
from kernels.course.chapter import ROOT, ExerciseFailed, grade, launch_or_stored
from kernels.measure.correctness import Checked


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """A fake H100 with 3000 GB/s read and 2500 GB/s copy bandwidth; counts the measurements."""
    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(bench, "read_bandwidth", lambda: calls.append("read") or 3000.0)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: calls.append("copy") or 2500.0)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    return calls


MEASURED = [bench.Measurement("mse", "eager", (4096,), 32768, 0.002),
            bench.Measurement("mse", "v1", (64, 64), 32768, 0.001)]


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_save_writes_the_rows_of_the_chapter_with_its_gpu_and_peak(gpu, tmp_path):
    ch = Chapter("ch3")
    path = ch.save(MEASURED)
    assert path == tmp_path / "results" / "ch3.csv"
    rows = read_csv(path)
    assert [r["provider"] for r in rows] == ["eager", "v1"]
    assert rows[0] == {"gpu": "NVIDIA H100 80GB HBM3", "chapter": "ch3", "loss": "mse",
                       "provider": "eager", "shape": "4096", "bytes": "32768", "ms": "0.002",
                       "gbps": "16.384", "peak_gbps": "3000"}
    assert rows[1]["shape"] == "64x64"
    # The same bytes as results.rows_from + results.save, the code it replaces.
    expected = results.save(results.rows_from(MEASURED, "NVIDIA H100 80GB HBM3", "ch3", 3000.0),
                            "ch3", tmp_path / "by_hand.csv")
    assert path.read_text() == expected.read_text()


def test_the_peak_is_measured_once_and_only_when_asked_for(gpu):
    ch = Chapter("ch2")
    assert gpu == []  # creating a chapter touches no GPU
    assert ch.peak == 3000.0
    ch.save(MEASURED)
    ch.save(MEASURED, "ch2_again")
    assert gpu == ["read"]


def test_a_chapter_may_compare_with_the_copy_bandwidth(gpu):
    ch = Chapter("ch7", bandwidth="copy")
    ch.save(MEASURED)
    assert {r["peak_gbps"] for r in read_csv(results.results_path("ch7"))} == {"2500"}
    assert gpu == ["copy"]
    with pytest.raises(ValueError, match="bandwidth"):
        Chapter("ch7", bandwidth="write")


def test_save_under_another_name_keeps_the_chapter_column(gpu, tmp_path):
    path = Chapter("ch6").save(MEASURED, "ch6_bf16")
    assert path == tmp_path / "results" / "ch6_bf16.csv"
    assert {r["chapter"] for r in read_csv(path)} == {"ch6"}
    assert [r["provider"] for r in Chapter("ch6").rows("ch6_bf16")] == ["eager", "v1"]


def test_rows_already_made_are_written_as_they_are(gpu):
    made = [dict(gpu="2 x H200", chapter="ch8", loss="cross_entropy_bf16", provider="2 GPUs",
                 shape="8192x256000", bytes=8388608000, ms="1.5", gbps="5592.41",
                 peak_gbps="4400")]
    ch = Chapter("ch8")
    ch.save(made)
    assert gpu == []  # neither the GPU's name nor its bandwidth was needed
    [row] = ch.rows()
    assert row["gpu"] == "2 x H200" and row["peak_gbps"] == 4400.0
    assert row["shape"] == (8192, 256000) and row["bytes"] == 8388608000


def test_rows_reads_numbers_as_numbers(gpu):
    ch = Chapter("ch3")
    ch.save(MEASURED)
    first, second = ch.rows()
    assert first["shape"] == (4096,) and second["shape"] == (64, 64)
    assert first["ms"] == pytest.approx(0.002) and first["peak_gbps"] == 3000.0
    assert first["gbps"] == pytest.approx(32768 / 2e-6 / 1e9)


def test_published_rows_ignore_the_results_folder(gpu, monkeypatch, tmp_path):
    published = tmp_path / "published"
    results.save(results.rows_from(MEASURED[:1], "A100", "ch1", 1500.0), "ch1",
                 published / "ch1.csv")
    monkeypatch.setattr(results, "PUBLISHED_DIR", published)
    assert not (tmp_path / "results").exists()  # an empty results folder: nothing measured
    [row] = Chapter("ch1").published_rows()
    assert row["gpu"] == "A100" and row["peak_gbps"] == 1500.0
    with pytest.raises(FileNotFoundError):
        Chapter("ch1").rows()


def test_the_solutions_read_the_committed_measurements(gpu):
    """Issue 14: solutions/ch1 and ch6 run on their own, with an empty results folder."""
    assert results.PUBLISHED_DIR == ROOT / "book" / "results"
    for chapter, loss in (("ch1", "memory"), ("ch6", "mse_fwd_bwd")):
        rows = Chapter(chapter).published_rows()
        assert results.select(rows, loss=loss), (chapter, loss)
        assert all(r["peak_gbps"] > 0 for r in rows)


# --- exercises -------------------------------------------------------------------------------

class FakeKernel:
    """What kernels.load returns, with the one op the checks below call."""

    def mse(self, pred, target):
        return ((pred - target) ** 2).mean()


@pytest.fixture
def builds(monkeypatch, untouched):
    """Replace kernels.build.loader.load, which Chapter.exercise calls: returns a FakeKernel, or
    raises what ``builds.error`` is set to. Every exercise file counts as untouched (the
    ``attempted`` fixture below says otherwise), so that a learner's edits of their files in
    this checkout change nothing here."""
    class Builds:
        error = None
        sources = []

    def fake_load(source):
        Builds.sources.append(source)
        if Builds.error is not None:
            raise Builds.error
        return FakeKernel()

    monkeypatch.setattr(loader, "load", fake_load)
    return Builds


def test_exercise_that_passes(builds, capsys):
    def check(kernel):
        assert isinstance(kernel, FakeKernel)
        print("PASS  mse           1 element                        (1,)")
        return Checked(1)  # kernels.check returns the number of cases passed

    assert Chapter("ch2").exercise("exercises/ch2_race.cu", check) is True
    out = capsys.readouterr().out
    assert out.splitlines() == ["PASS  mse           1 element                        (1,)",
                                "PASS  exercises/ch2_race.cu: every case of the check passes"]
    assert builds.sources == ["exercises/ch2_race.cu"]


def test_exercise_whose_check_raises_check_failed(builds, capsys):
    def check(kernel):
        print("PASS  mse           1 element                        (1,)")
        raise CheckFailed("FAIL mse, below one block (100,): expected 2.26963587, got "
                          "0.00742052682 (relative error 9.97e-01 > 1e-05)")

    assert Chapter("ch2").exercise("exercises/ch2_race.cu", check) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("FAIL mse, below one block (100,): expected 2.26963587")
    assert lines[2] == ("FAIL  exercises/ch2_race.cu: the case above gives a different answer "
                        "from PyTorch's (the cases before it pass): fix the kernel, then rerun "
                        "this cell")
    assert "Traceback" not in "\n".join(lines)


def test_exercise_whose_check_returns_false(builds, capsys):
    def check(kernel):  # chapter 5's and 6's checks print FAIL lines and return False
        print("FAIL  every row ignored: the mean is NaN     (5, 100): NaN where PyTorch has "
              "a number")
        return False

    assert Chapter("ch5").exercise("exercises/ch5_ignore_index.cu", check) is False
    assert capsys.readouterr().out.splitlines()[-1] == (
        "FAIL  exercises/ch5_ignore_index.cu: a case above FAILs: fix the first one, then "
        "rerun this cell")


def test_exercise_that_does_not_compile(builds, capsys):
    builds.error = KernelBuildError(
        "exercises/ch3_smooth_l1.cu did not compile:\n"
        "kernels/exercises/ch3_smooth_l1.cu(31): error: identifier \"dd\" is undefined")
    checked = []
    assert Chapter("ch3").exercise("exercises/ch3_smooth_l1.cu", checked.append) is False
    assert checked == []  # nothing to check
    assert capsys.readouterr().out.splitlines() == [
        "exercises/ch3_smooth_l1.cu did not compile:",
        "kernels/exercises/ch3_smooth_l1.cu(31): error: identifier \"dd\" is undefined",
        "FAIL  exercises/ch3_smooth_l1.cu: it does not compile: fix the first error above (its "
        "file and line are given), then rerun this cell"]


@pytest.mark.parametrize("message, advice", [
    ("mse_launch: invalid configuration argument\nException raised from ...", "fix the kernel"),
    ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...",
     "restart the notebook's kernel"),
])
def test_exercise_whose_op_raises(builds, capsys, message, advice):
    def check(kernel):
        raise RuntimeError(message)

    assert Chapter("ch2").exercise("exercises/ch2_warp_atomics.cu", check) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"RuntimeError: {message.splitlines()[0]}"
    assert lines[1].startswith("FAIL  exercises/ch2_warp_atomics.cu: the op raised the error above")
    assert advice in lines[1]
    assert len(lines) == 2  # the first line of the error only, no traceback


def test_exercise_names_a_file_of_the_repository_relative_to_it(builds, capsys):
    source = ROOT / "solutions" / "kernels" / "ch2_race.cu"
    assert Chapter("ch2").exercise(str(source), lambda kernel: True)
    assert capsys.readouterr().out == ("PASS  solutions/kernels/ch2_race.cu: every case of the "
                                       "check passes\n")
    assert builds.sources == [str(source)]  # built from the path given


def test_a_check_that_returns_none_is_an_error_not_a_pass(builds):
    """``check(...) and rule(...)`` with a check returning None never ran the rule: no verdict."""
    with pytest.raises(TypeError, match="returned None"):
        Chapter("ch2").exercise("exercises/ch2_race.cu", lambda kernel: None)


def test_an_unexpected_error_of_the_check_is_not_hidden(builds):
    def check(kernel):  # a bug in the course's check, not in the learner's kernel
        raise TypeError("check() got an unexpected keyword argument 'rtl'")

    with pytest.raises(TypeError):
        Chapter("ch2").exercise("exercises/ch2_race.cu", check)


# --- torch.compile's recompiles ----------------------------------------------------------------

def test_allow_recompiles_raises_dynamos_limit(monkeypatch):
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(config, name, 8)
    Chapter.allow_recompiles()
    assert getattr(config, name) == 64
    Chapter("ch4").allow_recompiles(100)
    assert getattr(config, name) == 100


# --- a learner's attempt: a failing one raises, so that pytest --nbval fails with the case ----

@pytest.fixture
def untouched(monkeypatch):
    """Every exercise file counts as the skeleton as shipped (kernels/build/skeletons.py)."""
    monkeypatch.setattr(skeletons, "attempted", lambda path: False)


@pytest.fixture
def attempted(monkeypatch):
    """Every exercise file counts as the learner's edit (kernels/build/skeletons.py)."""
    monkeypatch.setattr(skeletons, "attempted", lambda path: True)


def test_an_untouched_skeleton_that_fails_does_not_raise(builds, capsys):
    assert Chapter("ch5").exercise("exercises/ch5_ignore_index.cu", lambda kernel: False) is False


def test_an_attempt_whose_check_returns_false_raises_with_the_failing_case(builds, attempted, capsys):
    def check(kernel):
        print("PASS  one row                              (1, 10)")
        print("FAIL  every row ignored: the mean is NaN     (5, 100): NaN where PyTorch has a number")
        return False

    with pytest.raises(ExerciseFailed, match=r"exercises/ch5_ignore_index.cu: FAIL  every row "
                                             r"ignored: the mean is NaN +\(5, 100\)"):
        Chapter("ch5").exercise("exercises/ch5_ignore_index.cu", check)
    assert capsys.readouterr().out.splitlines()[-1].startswith("FAIL  exercises/ch5_ignore_index.cu")


def test_an_attempt_whose_check_raises_check_failed_raises_with_expected_and_got(builds, attempted):
    def check(kernel):
        raise CheckFailed("FAIL mse, below one block (100,): expected 2.26963587, got 0.0074")

    with pytest.raises(ExerciseFailed, match=r"expected 2.26963587, got 0.0074"):
        Chapter("ch2").exercise("exercises/ch2_race.cu", check)


def test_an_attempt_that_does_not_compile_raises_with_the_compiler_error(builds, attempted):
    builds.error = KernelBuildError("kernels/exercises/ch3_smooth_l1.cu(31): error: identifier "
                                    "\"dd\" is undefined")
    with pytest.raises(ExerciseFailed, match=r"ch3_smooth_l1.cu\(31\): error"):
        Chapter("ch3").exercise("exercises/ch3_smooth_l1.cu", lambda kernel: True)


def test_an_attempt_that_passes_returns_true(builds, attempted, capsys):
    assert Chapter("ch2").exercise("exercises/ch2_race.cu", lambda kernel: Checked(1)) is True
    assert capsys.readouterr().out.splitlines() == [
        "PASS  exercises/ch2_race.cu: every case of the check passes"]


def test_grade_leaves_the_shipped_file_and_a_pass_alone(untouched):
    """Chapters 8 and 9 check Python files with checkers of their own; grade applies the rule."""
    assert grade("exercises/ch9_model_new.py", False, "FAIL  100 HingeLoss mine: static") is None


def test_grade_raises_for_a_failing_attempt_with_the_checkers_verdict(attempted):
    assert grade("exercises/ch9_model_new.py", True, "") is None
    with pytest.raises(ExerciseFailed, match=r"ch9_model_new.py: FAIL  100 HingeLoss mine: coverage"):
        grade("exercises/ch9_model_new.py", False, "FAIL  100 HingeLoss mine: coverage\n")


def test_one_gpu_gets_the_stored_two_gpu_run_and_is_told_so(capsys):
    run = launch_or_stored("ch8_check", "check", 1, 1)
    out = capsys.readouterr().out.splitlines()
    stored = results.read_published_json("ch8_check")  # the run's own GPUs and date
    assert stored["gpus"] >= 2 and stored["run"]["ranks"] == stored["gpus"]
    assert out[:2] == [f"1 GPU here: the stored run of {stored['gpus']} x {stored['gpu']} "
                       f"({stored['date']}),",
                       "from book/results/ch8_check.json; on two GPUs this cell measures anew."]
    assert out[2:] == run["printed"].rstrip().splitlines() and len(run["cases"]) == 6
    assert all(case["passed"] for case in run["cases"])


def test_chapter_8s_check_raises_a_failing_attempt_with_its_first_failing_case(monkeypatch,
                                                                               attempted):
    import kernels.ops.ranks as ranks
    from kernels.exercises.ch8_checks import check_one_collective

    case = dict(split="vocab", rows=4, vocab=10, reduction="mean", same_bits=True)
    monkeypatch.setattr(ranks, "launch", lambda *args, **kwargs: {"cases": [
        {**case, "passed": True}, {**case, "rows": 5, "passed": False},
        {**case, "rows": 6, "passed": False}]})
    with pytest.raises(ExerciseFailed, match=r"FAIL  vocab split over 3 ranks, 5 x 10, mean, "
                                             r"smoothing 0  \(loss or gradient differs"):
        check_one_collective(ROOT / "kernels/exercises/ch8_one_collective.py")


def test_two_gpus_launch_the_task_and_keep_the_run(monkeypatch, tmp_path):
    """On two GPUs the cell measures anew: the task runs on nprocs processes with the options
    given, and the run is kept with GPU 0's name, the GPU count and the date."""
    import datetime

    import kernels.ops.ranks as ranks

    launched = []
    monkeypatch.setattr(ranks, "launch", lambda task, nprocs, **options: launched.append(
        (task, nprocs, options)) or {"printed": "rank 0: ok\n", "cases": []})
    monkeypatch.setattr(torch.cuda, "get_device_name", {0: "H100 #0", 1: "H100 #1"}.__getitem__)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    run = launch_or_stored("ch8_try", "check", 3, 2, echo=False, timeout=5)
    assert launched == [("check", 3, {"echo": False, "timeout": 5})]
    assert run == {"printed": "rank 0: ok\n", "cases": []}
    import json
    assert json.loads((tmp_path / "ch8_try.json").read_text()) == {
        "gpu": "H100 #0", "gpus": 2, "date": str(datetime.date.today()), "run": run}


def test_one_gpu_shows_the_stored_lines_only_when_echo_is_on(capsys):
    run = launch_or_stored("ch8_check", "check", 1, 1, echo=False)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith("from book/results/ch8_check.json")
    assert run == results.read_published_json("ch8_check")["run"]


@pytest.fixture
def only_mine(monkeypatch):
    """Only exercises/mine.cu (or .py) counts as the learner's edit: ``attempted`` must be
    asked about the file being graded."""
    monkeypatch.setattr(skeletons, "attempted", lambda path: str(path).startswith(
        "exercises/mine."))


def test_grade_asks_about_the_file_it_grades(only_mine):
    assert grade("exercises/theirs.py", False, "FAIL  x") is None
    with pytest.raises(ExerciseFailed, match=r"^exercises/mine.py: FAIL  x$"):
        grade("exercises/mine.py", False, "FAIL  x")


def test_exercise_asks_about_the_file_it_builds(builds, only_mine):
    assert Chapter("ch2").exercise("exercises/theirs.cu", lambda kernel: False) is False
    with pytest.raises(ExerciseFailed):
        Chapter("ch2").exercise("exercises/mine.cu", lambda kernel: False)


@pytest.mark.parametrize("message, verdict", [
    ("mse_launch: invalid configuration argument\nException raised from ...",
     "the op raised the error above: fix the kernel, then rerun this cell"),
    ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...",
     "the op raised the error above: the GPU context is lost after it, so restart the "
     "notebook's kernel before rerunning"),
])
def test_an_op_error_s_verdict_and_the_attempt_s_error_name_its_first_line(
        builds, only_mine, capsys, message, verdict):
    def check(kernel):
        raise RuntimeError(message)

    assert Chapter("ch2").exercise("exercises/theirs.cu", check) is False
    assert capsys.readouterr().out.splitlines()[1] == f"FAIL  exercises/theirs.cu: {verdict}"
    with pytest.raises(ExerciseFailed) as error:
        Chapter("ch2").exercise("exercises/mine.cu", check)
    assert str(error.value) == f"exercises/mine.cu: {message.splitlines()[0]}"


def test_an_op_error_without_a_message(builds, only_mine, capsys):
    def check(kernel):
        raise RuntimeError("")

    assert Chapter("ch2").exercise("exercises/theirs.cu", check) is False
    assert capsys.readouterr().out.splitlines()[0] == "RuntimeError: "
    with pytest.raises(ExerciseFailed) as error:  # no first line: the verdict says what to do
        Chapter("ch2").exercise("exercises/mine.cu", check)
    assert str(error.value) == ("exercises/mine.cu: the op raised the error above: fix the "
                                "kernel, then rerun this cell")


def test_an_attempt_that_fails_without_a_fail_line_raises_with_the_verdict(builds, only_mine):
    with pytest.raises(ExerciseFailed) as error:
        Chapter("ch5").exercise("exercises/mine.cu", lambda kernel: False)
    assert str(error.value) == ("exercises/mine.cu: a case above FAILs: fix the first one, then "
                                "rerun this cell")


def test_an_indented_fail_line_names_the_failing_case(builds, only_mine):
    def check(kernel):
        print("  PASS  one row (1, 10)\n    FAIL  every row ignored (5, 100): NaN")
        return False

    with pytest.raises(ExerciseFailed) as error:
        Chapter("ch5").exercise("exercises/mine.cu", check)
    assert str(error.value) == "exercises/mine.cu: FAIL  every row ignored (5, 100): NaN"


def test_exercise_names_a_file_outside_the_repository_as_given(builds, capsys, tmp_path):
    source = tmp_path / "my_race.cu"
    assert Chapter("ch2").exercise(str(source), lambda kernel: True)
    assert capsys.readouterr().out == f"PASS  {source}: every case of the check passes\n"
