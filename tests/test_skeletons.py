"""The exercises' skeletons as shipped (kernels/build/skeletons.py): the manifest is current, and
a learner's edit of an exercise file changes nothing the course checks about itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.build import provenance, skeletons
from kernels.build.build_cache import source_path

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = ROOT / "kernels/exercises/ch3_smooth_l1.cu"
KEY = "kernels/exercises/ch3_smooth_l1.cu"


def committed(path: Path) -> bytes | None:
    """The file as the checkout's HEAD has it; None without git or outside a commit."""
    run = subprocess.run(["git", "show", f"HEAD:{path.relative_to(ROOT).as_posix()}"], cwd=ROOT,
                         capture_output=True)
    return run.stdout if run.returncode == 0 else None


def test_the_manifest_lists_every_exercise_file_and_nothing_else():
    assert set(skeletons.shipped()) == {skeletons.key(p) for p in skeletons.learner_files()}
    names = {p.name for p in skeletons.learner_files()}
    assert {"ch3_smooth_l1.cu", "ch8_one_collective.py", "ch9_model_new.py"} <= names
    assert not {n for n in names if n.endswith("_checks.py") or n == "__init__.py"}


@pytest.mark.parametrize("path", skeletons.learner_files(), ids=lambda p: p.name)
def test_the_manifest_has_each_skeleton_as_committed(path):
    if skeletons.digest(path) == skeletons.shipped()[skeletons.key(path)]:
        return
    at_head = committed(path)
    if at_head is None:  # no git: an edit and a drifted manifest look the same, so say which
        pytest.fail(f"{path.name} differs from kernels/exercises/skeletons.json and there is no "
                    f"git to tell your edit from a skeleton changed without the manifest")
    if at_head != path.read_bytes():
        pytest.skip(f"{path.name} is your exercise in progress (it differs from the commit)")
    pytest.fail(f"{path.name} changed and kernels/exercises/skeletons.json did not: run "
                f"python -m kernels.build.skeletons --write")


def test_attempted_compares_with_the_skeleton_as_shipped(monkeypatch):
    real = skeletons.digest(EXERCISE)
    monkeypatch.setattr(skeletons, "shipped", lambda: {KEY: real})
    assert not skeletons.attempted(EXERCISE)
    monkeypatch.setattr(skeletons, "shipped", lambda: {KEY: "0" * 64})
    assert skeletons.attempted(EXERCISE)
    assert not skeletons.attempted(ROOT / "kernels/ch3_block_reduction/v3_sequential.cu")
    assert skeletons.attempted("exercises/ch3_smooth_l1.cu")  # named as load() takes it
    assert not skeletons.attempted("exercises/no_such_file.cu")


def test_a_file_outside_the_repository_is_not_an_attempt(tmp_path):
    """Chapter.exercise asks about any file it is given: one outside the repository (a path
    that has no key in the manifest) is no learner's attempt, and no crash."""
    outside = tmp_path / "ch3_smooth_l1.cu"
    outside.write_bytes(EXERCISE.read_bytes())
    assert not skeletons.attempted(outside)
    assert not skeletons.attempted(str(outside))


def test_a_learners_edit_does_not_make_a_notebook_stale(monkeypatch):
    """The notebook recorded the skeleton; the learner's file now differs from it."""
    monkeypatch.setattr(provenance, "shipped", lambda: {KEY: "a" * 64})
    assert skeletons.digest(EXERCISE) != "a" * 64
    assert provenance.changed_sources({"sources": {KEY: "a" * 64}}) == []


def test_a_changed_skeleton_makes_a_notebook_stale(monkeypatch):
    monkeypatch.setattr(provenance, "shipped", lambda: {KEY: "b" * 64})
    assert provenance.changed_sources({"sources": {KEY: "a" * 64}}) == [
        f"{KEY}'s skeleton changed since the notebook was executed"]


def test_the_listings_tool_leaves_a_learners_listing_alone(monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import refresh_listings
    finally:
        sys.path.pop(0)
    cell = 'show_source("exercises/ch3_smooth_l1.cu")'
    monkeypatch.setattr(refresh_listings, "attempted", lambda path: False)
    assert not refresh_listings.shows_a_learners_edit(cell)
    monkeypatch.setattr(refresh_listings, "attempted", lambda source: source_path(source) == EXERCISE)
    assert refresh_listings.shows_a_learners_edit(cell)
    assert not refresh_listings.shows_a_learners_edit('show_source("ch3_block_reduction/v3_sequential.cu")')


def test_a_notebook_records_the_python_operators_and_timing_it_imported(monkeypatch, tmp_path):
    """The code around the kernels (kernels/ops: arguments, chunks, autograd) and the code that
    times them (kernels/measure's events, spans and bench) shape a notebook's outputs too: each
    load logs those imported so far, and a change to one makes the notebooks that imported it
    stale."""
    import kernels.measure.events  # noqa: F401  (the timing)
    import kernels.ops.llm_head  # noqa: F401  (chapter 7's head: Python around a kernel)
    from kernels.build.build_cache import Sources

    log = tmp_path / "sources.jsonl"
    monkeypatch.setenv("KERNELS_SOURCES_LOG", str(log))
    provenance.record(Sources.read(source_path("ch3_block_reduction/v3_sequential.cu")))
    logged = {k: v for line in log.read_text().splitlines() for k, v in json.loads(line).items()}
    head = "kernels/ops/llm_head.py"
    assert logged[head] == skeletons.digest(ROOT / head)
    assert "kernels/ch3_block_reduction/v3_sequential.cu" in logged
    timing = "kernels/measure/events.py"
    assert logged[timing] == skeletons.digest(ROOT / timing)
    timing_files = {m.replace(".", "/") + ".py" for m in provenance.TIMING_MODULES}
    assert all(k.startswith("kernels/ops/") or k in timing_files
               for k in logged if k.endswith(".py"))
    assert provenance.changed_sources({"sources": logged}) == []
    logged[head], logged[timing] = "0" * 64, "1" * 64
    assert provenance.changed_sources({"sources": logged}) == [
        f"{timing} changed since the notebook was executed",
        f"{head} changed since the notebook was executed"]


def test_without_a_manifest_nothing_is_shipped_and_no_notebook_is_stale_for_it(monkeypatch,
                                                                               tmp_path):
    """A copy of the course without kernels/exercises/skeletons.json (a learner's own folder)
    compares every recorded file with the file itself, as for any other source."""
    monkeypatch.setattr(skeletons, "MANIFEST", tmp_path / "skeletons.json")
    assert skeletons.shipped() == {}
    assert provenance.changed_sources({"sources": {KEY: skeletons.digest(EXERCISE)}}) == []


# --- make check's gate and the command line, in this process (tests/test_make_check.py runs them
# --- through make, where a mutation tool cannot see which code ran) ----------------------------

def test_the_chapters_are_the_numbered_notebooks():
    found = skeletons.chapters()
    assert list(found)[:9] == list(range(1, 10))
    assert found[3].name == "03_block_reduction.ipynb" and found[3].is_file()


@pytest.mark.parametrize("chapter", ["12", "03", "three", "", "0", "-1"])
def test_the_gate_refuses_an_unknown_chapter_in_one_line(chapter, capsys):
    assert skeletons.grade_ready(chapter) == 2
    listed = " ".join(map(str, skeletons.chapters()))
    assert capsys.readouterr().out.splitlines() == [
        f"make check: no chapter {chapter!r}; CHAPTER is one of {listed} (make check CHAPTER=3)"]


@pytest.mark.parametrize("gpu", [False, True])
def test_the_gate_lists_the_chapters_files_then_needs_a_gpu(gpu, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(skeletons, "attempted", lambda path: path.name == "ch3_smooth_l1.cu")
    assert skeletons.grade_ready("3") == (0 if gpu else 2)
    lines = capsys.readouterr().out.splitlines()
    listed = [line for line in lines if not line.startswith("make check:")]
    expected = sorted(skeletons.key(p) for p in skeletons.learner_files()
                      if p.name.startswith("ch3_"))
    assert sorted(line.split()[-1] for line in listed) == expected and expected
    assert "attempted      kernels/exercises/ch3_smooth_l1.cu" in listed
    assert all(line.startswith("not attempted  ") for line in listed if "smooth_l1" not in line)
    assert [line for line in lines if line not in listed] == ([] if gpu else [
        "make check: grading runs the exercises' checks on a CUDA GPU, and this machine has "
        "none; nothing was graded (run it on a GPU machine or on Colab)"])


def test_write_records_each_file_as_it_is(tmp_path, monkeypatch):
    committed = skeletons.MANIFEST.read_text()
    monkeypatch.setattr(skeletons, "MANIFEST", tmp_path / "skeletons.json")
    table = skeletons.write()
    # the skeletons are as shipped, so writing again changes no byte of the committed manifest
    assert (tmp_path / "skeletons.json").read_text() == committed
    assert json.loads((tmp_path / "skeletons.json").read_text()) == table
    assert table == {skeletons.key(p): skeletons.digest(p) for p in skeletons.learner_files()}
    assert (tmp_path / "skeletons.json").read_text().endswith("}\n")


@pytest.mark.parametrize("argv, code", [(["--grade", "12"], 2), (["--chapter", "3"], 0),
                                        (["--chapter", "03"], 0), ([], 0)])
def test_the_command_line(argv, code, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["skeletons", *argv])
    done = {"ch3_smooth_l1.cu", "ch2_race.cu"}
    monkeypatch.setattr(skeletons, "attempted", lambda path: Path(path).name in done)
    assert skeletons.main() == code
    out = capsys.readouterr().out.splitlines()
    if argv[:1] == ["--grade"]:
        assert out[0].startswith("make check: no chapter '12'")
    else:
        files = [p for p in skeletons.learner_files()
                 if not argv or p.name.startswith("ch3_")]
        assert out == [f"{'attempted' if p.name in done else 'not attempted':<14} "
                       f"{skeletons.key(p)}" for p in files]


def test_the_command_lines_help(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["skeletons", "--help"])
    with pytest.raises(SystemExit):
        skeletons.main()
    text = " ".join(capsys.readouterr().out.split())
    assert skeletons.__doc__.splitlines()[0] in text
    for option in ("--write record the skeletons as they are now in skeletons.json",
                   "--chapter CHAPTER list only this chapter's exercise files",
                   "--grade CHAPTER make check's gate: the chapter exists and a GPU is here"):
        assert option in text, option


def test_the_command_line_writes_the_manifest_only_when_asked(monkeypatch, capsys):
    written = []
    monkeypatch.setattr(skeletons, "write", lambda: written.append(1) or {"a": "0", "b": "1"})
    monkeypatch.setattr(skeletons, "attempted", lambda path: False)
    monkeypatch.setattr(sys, "argv", ["skeletons", "--chapter", "3"])
    skeletons.main()
    assert written == [] and not capsys.readouterr().out.startswith("wrote")
    monkeypatch.setattr(sys, "argv", ["skeletons", "--write", "--chapter", "3"])
    skeletons.main()
    assert written == [1]
    assert capsys.readouterr().out.splitlines()[0] == \
        "wrote kernels/exercises/skeletons.json: 2 skeletons"
