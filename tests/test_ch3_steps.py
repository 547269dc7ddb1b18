"""The staged chapter 3 steps (bench/experiments/ch3_steps) on the CPU: their sources against
the chapter's files, and run.py's checks and tables with stand-ins for the kernels.

- v15, the last step, is chapter 3's v6_vectorized_grid_stride.cu with its comments aside and
  WrappedIndex moved to common/wrapped_index.cuh: the same code, so it can replace it.
- v1-v5 are the chapter's v1-v5 with one index simplified and a broadcast target refused.
- every step is at most 300 lines and its first line names its version.
- run.py passes correct stand-ins, FAILs a wrong one and a step that should refuse a broadcast
  target but does not, and prints the ladder and the 3 % verdicts. No GPU, no build.
"""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from kernels import bench, get_loss

ROOT = Path(__file__).resolve().parents[1]
STEPS_DIR = ROOT / "bench" / "experiments" / "ch3_steps"
CHAPTER = ROOT / "kernels" / "ch3_block_reduction"
spec = importlib.util.spec_from_file_location("ch3_steps_run", STEPS_DIR / "run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def code(text: str) -> str:
    """The C++ without comments and blank lines, each line's spacing collapsed."""
    text = re.sub(r"//[^\n]*", "", text)
    return "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def test_every_step_is_listed_short_and_names_its_version():
    files = sorted(p.name for p in STEPS_DIR.glob("*.cu"))
    assert sorted(f for f, _ in run.STEPS) == files
    for name in files:
        lines = (STEPS_DIR / name).read_text().splitlines()
        assert len(lines) <= 300, name
        number = re.match(r"v(\d+)_", name).group(1)
        assert lines[0].startswith(f"// Chapter 3, version {number}: "), (name, lines[0])


def test_the_last_step_is_the_chapters_final_kernel():
    header = code((ROOT / "kernels" / "common" / "wrapped_index.cuh").read_text())
    struct = header[header.index("struct WrappedIndex"):]
    final = code((CHAPTER / "v6_vectorized_grid_stride.cu").read_text())
    assert struct in final  # the header's struct is the one v6 defines
    last = code((STEPS_DIR / run.STEPS[-1][0]).read_text())
    assert last.replace('#include "wrapped_index.cuh"\n', "") == final.replace(struct + "\n", "")


@pytest.mark.parametrize("name", [f for f, _ in run.STEPS[:5]])
def test_the_first_five_differ_from_the_chapter_only_in_the_target_index(name):
    step, chapter = code((STEPS_DIR / name).read_text()), code((CHAPTER / name).read_text())
    refusal = "if (a->target_len != a->n) return cudaErrorNotSupported;\n"
    assert step.count(refusal) == 1 and "% a.target_len" not in step
    old = "a.target[a.target_len == a.n ? i : i % a.target_len]"
    assert step.replace(refusal, "") == chapter.replace(old, "a.target[i]")


class FakeKernel:
    """A built file's stand-in: each op is the loss's PyTorch reference; a step before v7 (and
    chapter 3's v1-v5) refuses a broadcast target, as its launcher does."""

    def __init__(self, path, wrong=(), broadcast_anyway=()):
        name = Path(path).name
        number = int(re.match(r"v(\d+)_", name).group(1))
        self.source = str(path)
        chapter = "ch3_steps" not in str(path)
        self.cached = True
        ops = ["mse"]
        if number >= 6:
            ops.append("smooth_l1")
        if number >= 7 or (chapter and number == 6):
            ops.append("hinge")
        self.ops = {op: self._op(op, name in wrong, "hinge" in ops or name in broadcast_anyway)
                    for op in ops}

    @staticmethod
    def _op(op, wrong, broadcasts):
        def call(pred, target):
            if not broadcasts and target.numel() != pred.numel():
                raise RuntimeError("kernel launch failed: operation not supported")
            value = get_loss(op).reference(pred, target)
            return value * 1.001 if wrong else value
        return call

    def __getattr__(self, op):
        return self.__dict__["ops"][op]


def run_on_cpu(monkeypatch, capsys, wrong=(), broadcast_anyway=()):
    import torch

    from kernels.build import toolchain
    from kernels.measure import events

    def fake_runs(providers, loss, shape, runs=3, **kwargs):
        # every kernel at 1.0 ms but v15 at 1.01, eager at 2.0: within 3 %
        times = {"eager": 2.0, "v15": 1.01}
        return [[bench.Measurement(loss, p, tuple(shape), 64, times.get(p, 1.0))
                 for p in providers] for _ in range(runs)]

    monkeypatch.setattr(run, "DEVICE", "cpu")
    # float64 references of 4 M elements for 15 steps take the CPU a minute: smaller, same kinds
    monkeypatch.setattr(run, "SHAPES", [(1,), (3,), (100_003,), (257, 1_031)])
    monkeypatch.setattr(run, "ROWS", [(5, 1), (3, 100), (700, 1_001), (257, 1_028)])
    monkeypatch.setattr(run, "build_all", lambda archs, workers: None)
    monkeypatch.setattr(toolchain, "require_gpus", lambda count, script: 1)
    monkeypatch.setattr(toolchain, "target_archs", lambda archs=None: ("9.0",))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "stand-in")
    monkeypatch.setattr(bench, "bench_loss_runs", fake_runs)
    monkeypatch.setattr(events, "time_ms", lambda fn, args, **kw: 1.0)
    import kernels

    monkeypatch.setattr(kernels, "load", lambda path, archs=None: FakeKernel(
        path, wrong, broadcast_anyway))
    monkeypatch.setattr(sys, "argv", ["run.py", "--sizes", "10,12"])
    status = run.main()
    return status, capsys.readouterr().out


def test_run_passes_correct_stand_ins_and_prints_the_ladder(monkeypatch, capsys):
    status, out = run_on_cpu(monkeypatch, capsys)
    assert "FAIL" not in out and "MISS" not in out, out[-3000:]
    assert status == 0
    assert "PASS  v3    mse refuses a broadcast target" in out
    assert "PASS  v7    mse (700, 1001) with a row target (1001,)" in out
    assert "PASS  v7    hinge (100003,)" in out
    assert "PASS  v15   hinge row target, a view [1:] (unaligned)" in out
    for step in ("v1", "v6", "v15"):
        assert re.search(rf"^{step} +\S", out, re.MULTILINE), step
    assert out.count("v15 / ch3 v6 = 1.010") == 3 * 2  # 3 losses, 2 sizes
    assert "PASS  mse 2^10: v15 / ch3 v6 = 1.010" in out
    assert re.search(r"^PASS  every check of every step \(0 of \d+ failed\)$", out, re.MULTILINE)
    assert ("PASS  last step within 3 % of ch3_block_reduction/v6_vectorized_grid_stride.cu "
            "(6 of 6 losses x sizes)") in out


def test_run_fails_a_wrong_step_and_a_step_that_should_refuse(monkeypatch, capsys):
    status, out = run_on_cpu(monkeypatch, capsys, wrong=("v9_grid_stride.cu",),
                             broadcast_anyway=("v4_first_add_during_load.cu",))
    assert status == 1
    assert re.search(r"^FAIL  v9    hinge \(3, 100\)", out, re.MULTILINE), out[-3000:]
    assert "FAIL  v4    mse refuses a broadcast target" in out
    assert "PASS  v8    hinge (3, 100)" in out
    assert "FAIL  every check of every step" in out


def test_help_needs_no_gpu_and_without_one_it_says_so_in_one_line():
    """tests/test_bench_scripts.py's rules, which look at bench/*.py only."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    script = "bench/experiments/ch3_steps/run.py"
    helped = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: "), helped.stderr
    done = subprocess.run([sys.executable, script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == [f"{script} needs 1 CUDA GPU(s); this machine "
                                                "has 0."], done.stdout
    assert done.returncode == 2
