"""Where the host's time goes in a small training step's loss: forward + backward, per call.

    python bench/host_overhead.py        # on the GPU machine

On small inputs a training step is bound by the host: Python, the dispatcher and autograd's
bookkeeping, not the GPU. This prints the wall time per loss step (the GPU waited for at the
end) for PyTorch's losses and the course's operators on small inputs, then the functions that
take the host's time in our cross-entropy step (cProfile, sorted by own time).
"""
import argparse
import cProfile
import pstats
import time
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch
import torch.nn.functional as F

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels.ops import operators

STEPS = 2000


def per_step_us(fn, *args):
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(STEPS):
        fn(*args)
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - started) / STEPS


def step(loss_fn):
    def run(pred, target):
        pred.grad = None
        loss_fn(pred, target).backward()
    return run


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    require_gpus(1, "bench/host_overhead.py")
    ops = operators.build()
    logits = torch.randn(2048, 98, device="cuda", requires_grad=True)
    labels = torch.randint(0, 98, (2048,), device="cuda")
    pred = torch.randn(4096, device="cuda", requires_grad=True)
    target = torch.randn(4096, device="cuda")
    cases = {
        "F.cross_entropy 2048x98": (step(F.cross_entropy), logits, labels),
        "ops.cross_entropy 2048x98": (step(ops.cross_entropy), logits, labels),
        "F.mse_loss 4096": (step(F.mse_loss), pred, target),
        "ops.mse 4096": (step(ops.mse), pred, target),
    }
    for name, (fn, *args) in cases.items():
        print(f"{name:<28} {per_step_us(fn, *args):8.1f} µs per step (host-bound)")
    profiler = cProfile.Profile()
    fn = step(ops.cross_entropy)
    profiler.enable()
    for _ in range(STEPS):
        fn(logits, labels)
    torch.cuda.synchronize()
    profiler.disable()
    print(f"\nops.cross_entropy step, {STEPS} calls, by own time:")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
