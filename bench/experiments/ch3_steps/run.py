"""Chapter 3's ladder staged with one change per step: each step checked, then timed in one run.

Issue 59 item 3: each step is timed beside its predecessor, chapter 3's current version and
eager PyTorch, all on the same inputs in the same process.

    python bench/experiments/ch3_steps/run.py                 # 2-3 minutes on an H100 (estimated)
    python bench/experiments/ch3_steps/run.py --build-only    # no GPU needed: compile every step

The steps live next to this script (README.md lists them): v1-v5 are chapter 3's versions with
the simple target index a.target[i] (their launchers refuse a broadcast target); v6-v15 split
chapter 3's v6_vectorized_grid_stride.cu into one change each, and v15 does what it does.

It prints, in order:
- every build and its seconds (the builds run in parallel processes first);
- PASS or FAIL for each step and each check against a float64 PyTorch reference: odd sizes (not
  multiples of 4, 32 or 128), a tiny one, views that start 4 bytes past a 16-byte boundary
  (pred and target alike, and unlike), 2-D inputs, and a broadcast target (Hinge's row; any loss
  from v7 on, which claims it; v1-v6 must refuse one). float32 only: the only dtype the steps
  claim (the binding refuses the others);
- per loss, the ladder table at each size: the step's time, / eager, / its predecessor and
  / chapter 3's version (the same-named file for v1-v5, v6_vectorized_grid_stride.cu after),
  each the median of three runs in turn (kernels.measure.bench.bench_loss_runs);
- the time of unaligned views (x[1:]) for the steps that read vectors (version 14's change);
- PASS or MISS for the last step within 3 % of v6_vectorized_grid_stride.cu, at each size and
  loss; (information) each simple-index copy v1-v5 against its chapter version; then one
  summary line for the checks and one for the 3 % target.

It writes nothing into book/results. The exit status is 1 if any check FAILs or a target MISSes.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

SCRIPT = "bench/experiments/ch3_steps/run.py"
CHAPTER = "ch3_block_reduction"
FINAL = f"{CHAPTER}/v6_vectorized_grid_stride.cu"
# (file, the one change against the step before). v1-v5: chapter 3's changes, index simplified.
STEPS = [
    ("v1_interleaved_divergent.cu", "tree in smem, interleaved"),
    ("v2_interleaved_strided.cu", "strided index: no divergence"),
    ("v3_sequential.cu", "sequential: no bank conflicts"),
    ("v4_first_add_during_load.cu", "first add during load"),
    ("v5_warp_shuffle_tail.cu", "warp-shuffle tail"),
    ("v6_loss_functor.cu", "the loss as a functor"),
    ("v7_broadcast_target.cu", "broadcast target (Hinge)"),
    ("v8_warp_first_block_sum.cu", "block sum: warps first"),
    ("v9_grid_stride.cu", "resident grid, grid-stride"),
    ("v10_one_atomic_per_block.cu", "one atomic per block"),
    ("v11_wrapped_index.cu", "no % per element"),
    ("v12_float4_loads.cu", "16-byte loads"),
    ("v13_four_loads_in_flight.cu", "4 loads per input in flight"),
    ("v14_peel_unaligned_head.cu", "peel an unaligned head"),
    ("v15_broadcast_float4.cu", "broadcast row as float4"),
]
LOSSES = ("mse", "smooth_l1", "hinge")
SIZES = "14,20,24,28"  # log2 of the elements: launch-bound, small, memory-bound twice
WITHIN = 1.03  # the last step's time / the chapter's final version's, at most
RTOL = 1e-5  # the chapter's check suite's tolerance
# The checks' shapes. A target of pred's shape: 1 and 3 elements, not a multiple of 4, 32 or 128
# (small and over 2^22), 2-D. A row target: a row of 1, odd rows, a row not a multiple of 4, rows
# of 4k elements (v15 reads them as float4), many rows (every thread's index wraps).
SHAPES = [(1,), (3,), (100_003,), ((1 << 22) + 7,), (257, 1_031)]
ROWS = [(5, 1), (3, 100), (1_031, 1_031), (700, 1_001), (257, 1_028), (2_049, 2_048)]
DEVICE = "cuda"  # tests/test_ch3_steps.py runs the script's logic on the CPU with stand-ins
CHANGE = {file.split("_")[0]: change for file, change in STEPS}  # "v12" -> its change
STEP_FILE = {file.split("_")[0]: file for file, _ in STEPS}


def label(step: str) -> str:
    return step.split("_")[0]  # "v12"


def chapter_file(step: str) -> str:
    """The chapter version a step is compared with: its namesake for v1-v5, else the final."""
    same = ROOT / "kernels" / CHAPTER / step
    return f"{CHAPTER}/{step}" if same.is_file() else FINAL


def files() -> dict[str, str]:
    """provider name -> kernel file (absolute for the steps, relative to kernels/ for chapter 3)."""
    found = {label(step): str(HERE / step) for step, _ in STEPS}
    for step, _ in STEPS:
        chapter = chapter_file(step)
        found["ch3 " + label(Path(chapter).name)] = chapter
    return found


def build_all(archs, workers: int) -> None:
    """Every file built in parallel processes (a fresh machine has no cache: one after another,
    21 builds of 10-20 s each would take most of the run); the main process then loads them
    from the cache."""
    from kernels.build.loader import builds_in_processes

    with builds_in_processes(list(files().values()), archs, workers) as futures:
        for path, future in futures.items():
            _, seconds, cached = future.result()
            print(f"build {path}: {'cached' if cached else 'built'} in {seconds:.1f} s",
                  flush=True)


class Checks:
    def __init__(self):
        self.failed = self.count = 0

    def report(self, name: str, what: str, ok: bool, detail: str = "") -> None:
        self.failed += not ok
        self.count += 1
        print(f"{'PASS' if ok else 'FAIL'}  {name:<5} {what}{': ' + detail if detail else ''}")


def check_step(name: str, kernel, checks: Checks) -> None:
    """Every op of one step against float64 on odd sizes, unaligned views and broadcast rows."""
    import torch

    from kernels import get_loss
    from kernels.measure.correctness import relative_error

    gen = torch.Generator(device=DEVICE).manual_seed(59)

    def compare(op, pred, target, what):
        try:
            got = getattr(kernel, op)(pred, target)
            torch.cuda.synchronize()
        except RuntimeError as error:
            return checks.report(name, what, False, str(error).splitlines()[0])
        error = relative_error(got, get_loss(op).reference64((pred, target)))
        checks.report(name, what, error <= RTOL, f"relative error {error:.1e}")

    def values(*shape):
        return torch.randn(*shape, generator=gen, device=DEVICE)

    def labels(*shape):
        return torch.randint(0, 2, shape, generator=gen, device=DEVICE).float() * 2 - 1

    broadcasts = "hinge" in kernel.ops  # from v7 on: every op takes a row target
    for op in sorted(kernel.ops):
        target_of = labels if op == "hinge" else values
        for shape in SHAPES:
            compare(op, values(*shape), target_of(*shape), f"{op} {shape}")
        pred, target, other = values(100_004), target_of(100_004), target_of(100_005)
        compare(op, pred[1:], target[1:], f"{op} views [1:]: both 4 bytes past 16")
        compare(op, pred[1:], other[2:], f"{op} views [1:] and [2:]: misaligned unlike")
        if not broadcasts:
            pred, target = values(257, 1_031), target_of(1_031)
            try:
                getattr(kernel, op)(pred, target)
                torch.cuda.synchronize()
                refused = False
            except RuntimeError as error:
                refused = "not supported" in str(error)
            checks.report(name, f"{op} refuses a broadcast target (257, 1031) with (1031,)",
                          refused)
            continue
        for rows, cols in ROWS:
            compare(op, values(rows, cols), target_of(cols),
                    f"{op} ({rows}, {cols}) with a row target ({cols},)")
        row = target_of(1_029)
        compare(op, values(301, 1_028), row[1:], f"{op} row target, a view [1:] (unaligned)")


def ladder(measured: dict, run_ms: dict, loss: str, sizes: list[int], names: list[str]) -> list:
    """Print one loss's ladder table; return (size, final / chapter ratios of each run)."""
    print(f"\n{loss}: time in us, / eager, / the step before, / chapter 3's version "
          "(median of 3 runs)")
    head = f"{'step':<5}{'the one change':<30}"
    for n in sizes:
        head += f"{'2^%d' % round(math.log2(n)):>8}{'/eager':>7}{'/prev':>7}{'/ch3':>6}"
    print(head)
    previous = None
    for name in names:
        line = f"{name:<5}{CHANGE[name]:<30}"
        chapter = "ch3 " + label(Path(chapter_file(STEP_FILE[name])).name)
        for n in sizes:
            ms = measured[loss, n, name]
            prev = f"{ms / measured[loss, n, previous]:>7.2f}" if previous else f"{'':>7}"
            line += (f"{ms * 1e3:>8.1f}{ms / measured[loss, n, 'eager']:>7.2f}{prev}"
                     f"{ms / measured[loss, n, chapter]:>6.2f}")
        print(line)
        previous = name
    for name in sorted({p for (l, _, p) in measured if l == loss and p.startswith("ch3 ")}):
        print(f"{name:<35}" + "".join(f"{measured[loss, n, name] * 1e3:>8.1f}{'':>20}"
                                      for n in sizes))
    print(f"{'eager':<35}" + "".join(f"{measured[loss, n, 'eager'] * 1e3:>8.1f}{'':>20}"
                                     for n in sizes))
    last = label(STEPS[-1][0])
    return [(n, [a / b for a, b in zip(run_ms[loss, n, last], run_ms[loss, n, "ch3 v6"])])
            for n in sizes]


def unaligned_views(kernels_of: dict, n: int) -> None:
    """Version 14's change is invisible on the aligned inputs of the table: time x[1:] views."""
    import torch

    from kernels.measure.bench import gbps
    from kernels.measure.events import time_ms

    gen = torch.Generator(device=DEVICE).manual_seed(14)
    pred, target = (torch.randn(n + 1, generator=gen, device=DEVICE) for _ in range(2))
    args = [(pred[1:], target[1:])]
    print(f"\nmse on views x[1:] of 2^{round(math.log2(n))} + 1 elements (4 bytes past a 16-byte "
          "boundary), us and GB/s:")
    providers = {"eager": lambda p, t: torch.nn.functional.mse_loss(p, t)}
    providers.update({name: k.mse for name, k in kernels_of.items()
                      if name in ("v11", "v12", "v13", "v14", "v15", "ch3 v6")})
    for name, fn in providers.items():
        ms = time_ms(fn, args)
        print(f"{name:<8}{ms * 1e3:>8.1f}{gbps(8 * n, ms):>8.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=SIZES, help=f"log2 sizes (default {SIZES})")
    parser.add_argument("--build-only", action="store_true",
                        help="compile every step and chapter version, then stop (no GPU needed)")
    parser.add_argument("--archs", default=None,
                        help="compute capabilities to build for, e.g. 7.5,9.0 (default: the GPU)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                        help="parallel builds")
    opts = parser.parse_args()
    archs = tuple(opts.archs.split(",")) if opts.archs else None
    if opts.build_only:
        build_all(archs or ("7.5", "9.0"), opts.workers)
        return 0
    from kernels.build.toolchain import require_gpus

    require_gpus(1, SCRIPT)

    import torch

    from kernels import bench, get_loss, load

    started = time.perf_counter()
    warnings.filterwarnings("ignore", message="Using a target size")  # mse's broadcast rows
    from kernels.build.toolchain import target_archs

    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}")
    archs = target_archs(archs)  # the GPU's, asked here: the builders do not touch CUDA
    build_all(archs, opts.workers)
    kernels_of = {name: load(path, archs=archs) for name, path in files().items()}

    print("\nchecks against float64:")
    checks = Checks()
    for step, _ in STEPS:
        check_step(label(step), kernels_of[label(step)], checks)
    print(f"({time.perf_counter() - started:.0f} s)")

    sizes = [1 << int(k) for k in opts.sizes.split(",")]
    steps = [label(s) for s, _ in STEPS]
    measured, run_ms, verdicts = {}, {}, []
    for loss in LOSSES:
        names = [s for s in steps if loss in kernels_of[s].ops]
        chapter = sorted({p for p in kernels_of if p.startswith("ch3 ")
                          and loss in kernels_of[p].ops})
        for n in sizes:
            providers = {"eager": get_loss(loss).reference}
            providers.update({p: getattr(kernels_of[p], loss) for p in names + chapter})
            runs = bench.bench_loss_runs(providers, loss, bench.element_wise_shape(n, loss),
                                         reps=100 if n < 1 << 26 else 40)
            for i, m in enumerate(bench.median_of_runs(runs)):
                measured[loss, n, m.provider] = m.ms
                run_ms[loss, n, m.provider] = [run[i].ms for run in runs]
        print(f"{loss}: timed ({time.perf_counter() - started:.0f} s)", flush=True)
    for loss in LOSSES:
        names = [s for s in steps if loss in kernels_of[s].ops]
        verdicts.append((loss, ladder(measured, run_ms, loss, sizes, names)))
    unaligned_views(kernels_of, 1 << 24)

    print()
    missed, cases = 0, 0
    for loss, per_size in verdicts:
        for n, ratios in per_size:
            ratio = measured[loss, n, "v15"] / measured[loss, n, "ch3 v6"]
            ok = ratio <= WITHIN
            missed, cases = missed + (not ok), cases + 1
            print(f"{'PASS' if ok else 'MISS'}  {loss} 2^{round(math.log2(n))}: v15 / ch3 v6 = "
                  f"{ratio:.3f} (runs x{min(ratios):.2f}-{max(ratios):.2f}; target <= {WITHIN})")
    for step in steps[:5]:  # information: what the simple index costs or saves
        mse = {n: measured["mse", n, step] / measured["mse", n, "ch3 " + step] for n in sizes}
        ratios = [f"2^{round(math.log2(n))} x{ratio:.3f}" for n, ratio in mse.items()]
        print(f"info  {step} (target[i]) / chapter 3's {step}: " + ", ".join(ratios))
    print(f"\n{'PASS' if not checks.failed else 'FAIL'}  every check of every step "
          f"({checks.failed} of {checks.count} failed)")
    print(f"{'PASS' if not missed else 'MISS'}  last step within 3 % of {FINAL} "
          f"({cases - missed} of {cases} losses x sizes)")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 1 if checks.failed or missed else 0

if __name__ == "__main__":
    sys.exit(main())
