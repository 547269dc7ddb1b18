"""A probe, not a benchmark: a kernel file against its version at another commit, timed in
turns on the same inputs (a cross-entropy file with and without the loss-scaling guess).

    python tools/ab_kernel.py prepare 62e8d65 ch5_cross_entropy/v3_fused_rows.cu      # here
    python tools/ab_kernel.py time 62e8d65 ch5_cross_entropy/v3_fused_rows.cu \\
        --shape 32768x4096 --dtype float32 --backward                                   # GPU
    python tools/ab_kernel.py time f9d80a7 ch4_two_pass/v5_block_tiles.cu \\
        --loss mse --sizes 12,13,14                                                     # GPU

``prepare`` writes the file as it was at the commit, and the files of kernels/ it includes by
relative path (version 4 includes version 3), under _build/ab/<commit>/: carry ``_build/ab`` to
the GPU machine (run's ``carry``), which has no git history. The headers of kernels/common come
from the working tree for both builds: when they changed between the two, this compares more
than the file. ``time`` builds both, times a step of each (the forward, or with ``--backward``
forward + ``loss.backward()``) in ``--turns`` alternating turns, with the guess and without it
(``grad_guess.wanted`` patched to False), and prints the medians, their ratios, and each
step's CUDA kernels from the profiler (``bench.kernel_times``). bench/PERFLOG.md, session 19,
has its first use. With ``--loss``, the file is an element-wise loss file of chapters 2-4 (its
ops take pred and target and return the 0-d mean): both builds and torch.compile are timed at
2^k elements for each k of ``--sizes`` (``bench.bench_loss_median``: L2 cleared, a median of
``--turns`` runs in turn), and each build's time / torch.compile's is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
INCLUDE = re.compile(r'#include\s+"(\.\./[^"]+)"')


def old_copy(commit: str, file: str) -> Path:
    return ROOT / "_build" / "ab" / commit / file


def prepare(commit: str, file: str) -> None:
    """The file at ``commit`` and, recursively, what it includes by a relative path."""
    text = subprocess.run(["git", "show", f"{commit}:kernels/{file}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    target = old_copy(commit, file)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target.relative_to(ROOT)}")
    for included in INCLUDE.findall(text):
        prepare(commit, os.path.normpath(os.path.join(os.path.dirname(file), included)))


def time_both(commit: str, file: str, shape: tuple[int, int], dtype_name: str, backward: bool,
         turns: int) -> None:
    import torch

    from kernels import bench, load
    from kernels.ops import grad_guess
    from kernels.ops.cross_entropy import cross_entropy

    builds = {"this tree": load(file), commit: load(old_copy(commit, file))}
    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(shape, generator=g, device="cuda").to(dtype).requires_grad_(backward)
    t = torch.randint(0, shape[1], (shape[0],), generator=g, device="cuda")
    fns = {}
    for name, kernel in builds.items():
        loss = lambda a, b, k=kernel: cross_entropy(a, b, kernel=k)  # noqa: E731
        step = bench.training_step(loss) if backward else torch.no_grad()(loss)
        fns[name] = step
        if backward:
            fns[f"{name}, no guess"] = bench.patched(step, grad_guess, "wanted",
                                                     lambda *_: False)
    times = bench.in_turns(fns, [(x, t)], turns)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"{torch.cuda.get_device_name()}: {file} {shape[0]}x{shape[1]} {dtype_name}, "
          f"{'forward + backward' if backward else 'forward'}, median of {turns} turns (ms)")
    for name, ms in median.items():
        print(f"  {name:<28} {ms:.4f}   x{ms / median['this tree']:.3f} of this tree")
    for name, fn in fns.items():
        bench.kernel_times(name, fn, (x, t))


def time_losses(commit: str, file: str, loss: str, exponents: list[int], turns: int) -> None:
    import torch

    from kernels import Chapter, bench, load

    builds = {"this tree": load(file), commit: load(old_copy(commit, file))}
    Chapter.allow_recompiles(64)  # one graph per size
    print(f"{torch.cuda.get_device_name()}: {file}, {loss}, time / torch.compile's "
          f"(median of {turns} runs)")
    for k in exponents:
        ops = {name: getattr(kernel, loss) for name, kernel in builds.items()}
        ms = {m.provider: m.ms for m in bench.median_against_compile(ops, loss, 1 << k, turns)}
        base = ms["torch.compile"]
        print(f"  2^{k}: torch.compile {1e3 * base:8.2f} us"
              + "".join(f"   {name} x{ms[name] / base:.3f}" for name in builds))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare", "time"))
    parser.add_argument("commit")
    parser.add_argument("file",
                        help="relative to kernels/, e.g. ch5_cross_entropy/v3_fused_rows.cu")
    parser.add_argument("--shape", default="32768x4096")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--loss", help="an element-wise loss file: time this op of it (mse, ...)")
    parser.add_argument("--sizes", default="12,14,16", help="with --loss: exponents k of 2^k")
    args = parser.parse_args()
    if args.action == "prepare":
        prepare(args.commit, args.file)
    elif args.loss:
        time_losses(args.commit, args.file, args.loss,
                    [int(k) for k in args.sizes.split(",")], args.turns)
    else:
        rows, classes = (int(n) for n in args.shape.split("x"))
        time_both(args.commit, args.file, (rows, classes), args.dtype, args.backward, args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
