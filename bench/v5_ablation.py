"""What each of chapter 4's mid-size changes to version 5 buys, measured in one run.

    python bench/v5_ablation.py            # about two minutes on an H100

Version 5 (kernels/ch4_two_pass/v5_block_tiles.cu) reads 2^14 to 2^18 elements with one
thread-block cluster on Hopper (CLUSTERS), queues its pass 2 as a programmatic dependent launch
(DEPENDENT_LAUNCH) and reads inputs of 2^21 to 2^26 elements with evict-first loads
(STREAM_LOADS). This script builds the file four times, as it is and with each switch set to 0,
and times the four builds and torch.compile (dynamic=False) side by side on the same inputs, for
MSE and Hinge at 2^12 to 2^26 elements, three times in turn (the median is kept). It prints
each build's time / torch.compile's and writes book/results/v5_ablation.csv
(kernels.measure.results columns), which chapter 4 tabulates. Each build and torch.compile is
also timed from its first kernel's start to its last kernel's end (the profiler), as providers
named "... (kernels)": identical kernels in two builds differ in the first timing and agree
in the second (chapter 4).
This is a benchmark, not a timed test.

    python bench/v5_ablation.py --shapes   # a probe: other block shapes and tiles, printed only
    python bench/v5_ablation.py --losses smooth_l1 --sizes 20,22,24 --runs 7   # printed only

``--shapes`` builds copies of the file with other values of pass 1's constants (threads per
block, loads per step, the smallest tile: ``SHAPES``), checks each copy's result against the
float64 mean, and prints each copy's time / torch.compile's from 2^12 to 2^24 elements (the single
block and the middle sizes), writing no file.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCE = ROOT / "kernels" / "ch4_two_pass" / "v5_block_tiles.cu"
BUILDS = {"v5": "", "v5, two passes": "#define CLUSTERS 0\n",
          "v5, ordinary launch of pass 2": "#define DEPENDENT_LAUNCH 0\n",
          "v5, plain loads": "#define STREAM_LOADS 0\n"}
# Pass 1's constants in other copies (the file has 512 threads, 2 loads, tiles of 4096 at least);
# a tile of at least one step (threads x loads x 4 elements) keeps every load in whole steps.
# The single block (1024 threads x 4 loads) must keep threads x loads x 4 = 2^14 elements: its
# straight-line kernel reads no more than that.
SHAPES = {"v5": {}, "256 threads": {"kThreads": 256},
          "256 threads, tiles of 2048": {"kThreads": 256, "kMinTile": 2048},
          "256 threads x 4 loads": {"kThreads": 256, "kUnroll": 4},
          "tiles of 8192": {"kMinTile": 8192},
          "4 loads, tiles of 8192": {"kUnroll": 4, "kMinTile": 8192},
          "one block of 512 x 8 loads": {"kOneBlockThreads": 512, "kOneBlockUnroll": 8},
          "one block of 256 x 16 loads": {"kOneBlockThreads": 256, "kOneBlockUnroll": 16}}
SIZES = [1 << k for k in range(12, 27, 2)]
SHAPE_SIZES = [1 << k for k in range(12, 25, 2)]
LOSSES = ("mse", "hinge")
RUNS = 3  # each size is timed this many times in turn; the table keeps the median


def with_constants(text: str, values: dict) -> str:
    """The source with each ``constexpr <type> <name> = <value>;`` of ``values`` given its value."""
    for name, value in values.items():
        text, found = re.subn(rf"(constexpr \w+ {name} = )[^;]+;", rf"\g<1>{value};", text)
        if found != 1:
            raise ValueError(f"{name}: {found} definitions in {SOURCE.name}")
    return text


def build_all(folder: Path, builds: dict) -> dict:
    """Each build's ops: the source with its switches defined before the file's own text (a
    string), or its constants changed (a dict)."""
    from kernels import load

    text, kernels = SOURCE.read_text(), {}
    for label, change in builds.items():
        path = folder / ("build_" + re.sub(r"\W+", "_", label) + ".cu")  # op names: no digit first
        path.write_text(change + text if isinstance(change, str) else with_constants(text, change))
        kernels[label] = load(path)
    return kernels


def check_all(kernels: dict, losses, sizes) -> None:
    """Each build against float64 at each size, as chapter 4 checks version 5 (a copy with other
    constants is new code): ``check_case`` raises CheckFailed, with its FAIL line, at the first
    wrong one."""
    from kernels import bench
    from kernels.measure.correctness import check_case

    for loss in losses:
        for n in sizes:
            for label, kernel in kernels.items():
                check_case(getattr(kernel, loss), loss, label, bench.element_wise_shape(n, loss),
                           rtol=1e-5)


def main() -> None:
    import torch
    from kernels import Chapter, bench, get_loss, results
    from kernels.build.toolchain import require_gpus
    from kernels.measure.spans import KERNELS, loss_spans

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", action="store_true", help="other block shapes and tiles")
    parser.add_argument("--losses", help="comma-separated losses (default mse,hinge); printed only")
    parser.add_argument("--sizes", help="log2 sizes, e.g. 20,22,24; printed only")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in turn per size (median)")
    opts = parser.parse_args()
    require_gpus(1, "bench/v5_ablation.py")
    shapes = opts.shapes
    builds, sizes = (SHAPES, SHAPE_SIZES) if shapes else (BUILDS, SIZES)
    losses = opts.losses.split(",") if opts.losses else LOSSES
    if opts.sizes:
        sizes = [1 << int(k) for k in opts.sizes.split(",")]
    probe = shapes or bool(opts.losses or opts.sizes) or opts.runs != RUNS  # the table's run or not
    Chapter.allow_recompiles(64)  # one graph per shape: 8 sizes x 2 losses
    gpu = torch.cuda.get_device_name()
    scratch = ROOT / ".scratch"  # git-ignored; load() builds files inside the repository only
    scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        kernels = build_all(Path(folder), builds)
        check_all(kernels, losses, sizes)
        rows = []
        print(f"{gpu}: time / torch.compile (below 1.00 is faster)")
        print(f"{'loss':<7}{'n':>6}{'compile us':>12}" + "".join(f"{label:>32}" for label in kernels))
        for loss in losses:
            ops = {label: getattr(k, loss) for label, k in kernels.items()}
            # for the spans; median_against_compile builds its own, which shares Dynamo's graphs
            compiled = torch.compile(get_loss(loss).reference, dynamic=False)
            for n in sizes:
                measured = bench.median_against_compile(ops, loss, n, opts.runs)
                spans = loss_spans({"torch.compile": compiled, **ops}, loss,
                                   bench.element_wise_shape(n, loss))
                rows += results.rows_from(measured + spans, gpu, "v5_ablation", 0.0)
                for timed, suffix in ((measured, ""), (spans, KERNELS)):
                    ms = {m.provider: m.ms for m in timed}
                    base = ms["torch.compile" + suffix]
                    print(f"{loss:<7}{'2^%d' % round(math.log2(n)):>6}{1e3 * base:>12.2f}"
                          + "".join(f"{ms[label + suffix] / base:>32.3f}" for label in kernels)
                          + suffix, flush=True)
    if not probe:  # the chapter's table: the switches, at the default losses, sizes and runs
        print(f"wrote {results.save(rows, 'v5_ablation')}")


if __name__ == "__main__":
    main()
