"""Why chapter 5's training cell times version 3 at 0.38 ms in some runs and 0.52-0.60 ms in
others, with the same kernel: a probe, not a benchmark.

    python bench/ce_train_probe.py        # on the GPU machine, about a minute

Chapter 5 times version 3's forward+backward at 32768 x 4096 fp32 as
``torch.autograd.grad(loss, logits)``, after a sweep of other shapes; ``cross_entropy_targets``
times the same op with ``loss.backward()`` and has given 3.2x eager every time. This times both
forms in turns (``bench.in_turns``), with the caching allocator's counters around each (a
``cudaMalloc`` per call would show as segments allocated during the timing) and the guess of
grad_output before and after (a wrong guess every step would add a scaling pass over the
gradient), then lists each form's kernels from the profiler. Run it twice: once as it is, once
with ``--sweep`` first (the chapter's other shapes, as the chapter runs them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench  # noqa: E402
from kernels.build.loader import load  # noqa: E402
from kernels.ops import grad_guess  # noqa: E402
from kernels.ops.cross_entropy import cross_entropy  # noqa: E402
from kernels.ops.schema import qualname  # noqa: E402

ROWS, CLASSES = 32768, 4096
SWEEP = [(13421772, 10), (1048576, 128), (131072, 1024), (4096, 32768), (1046, 128256)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="the chapter's other shapes first")
    args = parser.parse_args()
    require_gpus(1, "bench/ce_train_probe.py")
    v3 = load("ch5_cross_entropy/v3_fused_rows.cu")

    def loss(l, t):
        return cross_entropy(l, t, kernel=v3, check_targets=False)

    if args.sweep:
        for rows, classes in SWEEP:
            x = torch.randn(rows, classes, device="cuda")
            y = torch.randint(0, classes, (rows,), device="cuda")
            bench.time_ms(loss, [(x, y)])
            del x, y
    logits = torch.randn(ROWS, CLASSES, device="cuda", requires_grad=True)
    target = torch.randint(0, CLASSES, (ROWS,), device="cuda")
    forms = {"autograd.grad (chapter 5)": lambda l, t: torch.autograd.grad(loss(l, t), l),
             "backward (targets script)": bench.training_step(loss)}

    def guess() -> float:  # the op's guess of grad_output, on the GPU
        return grad_guess.current(qualname(v3, "cross_entropy"), logits.device).item()

    for name, fn in forms.items():
        before = torch.cuda.memory_stats()
        print(f"{name}: guess before {guess():g}", end="")
        ms = bench.time_ms(fn, [(logits, target)])
        after = torch.cuda.memory_stats()
        segments = after["segment.all.allocated"] - before["segment.all.allocated"]
        print(f", after {guess():g}; {1e3 * ms:.0f} us; segments allocated during: {segments}")
    times = bench.in_turns(forms, [(logits, target)])
    for name, turns in times.items():
        print(f"{name:<28} in turns: median {1e3 * statistics.median(turns):.0f} us, "
              f"turns " + ", ".join(f"{1e3 * t:.0f}" for t in turns))
    for name, fn in forms.items():
        bench.kernel_times(name[:12], fn, (logits, target))


if __name__ == "__main__":
    main()
