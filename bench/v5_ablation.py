"""What each of chapter 4's mid-size changes to version 5 buys, measured in one run.

    python bench/v5_ablation.py            # about two minutes on an H100

Version 5 (kernels/ch4_two_pass/v5_block_tiles.cu) queues its pass 2 as a programmatic dependent
launch (DEPENDENT_LAUNCH) and reads inputs of 2^21 to 2^25 elements with evict-first loads
(STREAM_LOADS). This script builds the file three times, as it is and with each switch set to 0,
and times the three builds and torch.compile (dynamic=False) side by side on the same inputs, for
MSE and Hinge at 2^12 to 2^26 elements, three times in turn (the median is kept). It prints
each build's time / torch.compile's and writes book/results/v5_ablation.csv
(kernels.measure.results columns), which chapter 4 tabulates.
This is a benchmark, not a timed test.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCE = ROOT / "kernels" / "ch4_two_pass" / "v5_block_tiles.cu"
BUILDS = {"v5": "", "v5, ordinary launch of pass 2": "#define DEPENDENT_LAUNCH 0\n",
          "v5, plain loads": "#define STREAM_LOADS 0\n"}
SIZES = [1 << k for k in range(12, 27, 2)]
LOSSES = ("mse", "hinge")
RUNS = 3  # each size is timed this many times in turn; the table keeps the median


def build_all(folder: Path) -> dict:
    """Each build's ops: the same source with its switch defined before the file's own text."""
    from kernels import load

    text, kernels = SOURCE.read_text(), {}
    for label, defines in BUILDS.items():
        path = folder / (label.replace(", ", "_").replace(" ", "_") + ".cu")
        path.write_text(defines + text)
        kernels[label] = load(path)
    return kernels


def main() -> None:
    import torch
    from kernels import Chapter, bench, get_loss, results

    Chapter.allow_recompiles(64)  # one graph per shape: 8 sizes x 2 losses
    gpu = torch.cuda.get_device_name()
    scratch = ROOT / ".scratch"  # git-ignored; load() builds files inside the repository only
    scratch.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        kernels = build_all(Path(folder))
        rows = []
        print(f"{gpu}: time / torch.compile (below 1.00 is faster)")
        print(f"{'loss':<7}{'n':>6}{'compile us':>12}" + "".join(f"{label:>32}" for label in kernels))
        for loss in LOSSES:
            reference = get_loss(loss).reference
            for n in SIZES:
                providers = {"torch.compile": torch.compile(reference, dynamic=False)}
                providers.update({label: getattr(k, loss) for label, k in kernels.items()})
                measured = bench.bench_loss_median(providers, loss, bench.element_wise_shape(n, loss),
                                                   runs=RUNS)
                rows += results.rows_from(measured, gpu, "v5_ablation", 0.0)
                ms = {m.provider: m.ms for m in measured}
                base = ms["torch.compile"]
                print(f"{loss:<7}{'2^%d' % round(math.log2(n)):>6}{1e3 * base:>12.2f}"
                      + "".join(f"{ms[label] / base:>32.3f}" for label in kernels), flush=True)
    print(f"wrote {results.save(rows, 'v5_ablation')}")


if __name__ == "__main__":
    main()
