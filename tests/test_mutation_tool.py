"""tools/mutation.py's bookkeeping (no mutmut needed): which module a mutant belongs to, the
score it records, and the reliability page's section made from it."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_core_module_exists_and_has_tests():
    mutation = tool("mutation")
    for module, tests in mutation.MODULES.items():
        assert (ROOT / module).is_file(), module
        assert tests and all((ROOT / t).is_file() for t in tests), module


def test_a_mutant_is_counted_in_its_module_and_survivors_are_named():
    mutation = tool("mutation")
    found = {
        "kernels.measure.correctness.x_check_case__mutmut_1": "killed",
        "kernels.measure.correctness.x_check_case__mutmut_2": "survived",
        "kernels.measure.correctness.x_check__mutmut_3": "timeout",
        "kernels.measure.correctness.x_relative_error__mutmut_4": "no tests",
        "kernels.course.chapter.xǁChapterǁexercise__mutmut_5": "survived",
    }
    assert mutation.module_of("kernels.course.chapter.xǁChapterǁexercise__mutmut_5") == \
        "kernels/course/chapter.py"
    table = mutation.score(found, ["kernels/measure/correctness.py", "kernels/course/chapter.py"])
    mine = table["kernels/measure/correctness.py"]
    assert (mine["mutants"], mine["ran"], mine["killed"], mine["no_tests"]) == (4, 3, 1, 1)
    assert mine["score"] == 33.3  # a timeout is not a kill: it may be a slow machine
    assert mine["survivors"] == ["kernels.measure.correctness.x_check_case__mutmut_2"]
    assert mine["timeouts"] == ["kernels.measure.correctness.x_check__mutmut_3"]
    assert table["kernels/course/chapter.py"]["score"] == 0.0


def test_a_new_run_keeps_the_equivalent_survivors_that_still_survive():
    mutation = tool("mutation")
    recorded = {"modules": {"kernels/losses.py": {"equivalent": ["m_1", "m_2"], "killed": 1}}}
    table = {"kernels/losses.py": {"killed": 3, "ran": 4, "survivors": ["m_2"]},
             "kernels/course/chapter.py": {"killed": 1, "ran": 1, "survivors": []}}
    mutation.record(recorded, table, "2026-11-29", "mutmut, 2 jobs")
    assert recorded["modules"]["kernels/losses.py"] == {
        "killed": 3, "ran": 4, "survivors": ["m_2"], "equivalent": ["m_2"],
        "date": "2026-11-29", "how": "mutmut, 2 jobs"}  # m_1 was killed: no longer equivalent
    assert recorded["modules"]["kernels/course/chapter.py"]["equivalent"] == []


def test_the_reliability_page_shows_the_score_and_its_date():
    report = tool("reliability_report")
    assert report.render_mutation({}) == ""
    text = report.render_mutation({"modules": {"kernels/losses.py": {
        "killed": 45, "ran": 50, "score": 90.0, "survivors": ["a", "b"], "timeouts": ["c"],
        "equivalent": ["b"], "no_tests": 7, "date": "2026-11-28"}}})
    # 45 killed of the 49 mutants that are not equivalent
    assert "| `kernels/losses.py` | 45 | 50 | 90.0% | 2 | 1 | 91.8% | 1 | 7 | 2026-11-28 |" in text
    older = report.render_mutation({"modules": {"kernels/losses.py": {
        "killed": 4, "ran": 5, "score": 80.0, "survivors": ["a"], "date": "2026-11-27"}}})
    assert "| `kernels/losses.py` | 4 | 5 | 80.0% | 1 | 0 | 80.0% | 0 | 0 | 2026-11-27 |" in older
