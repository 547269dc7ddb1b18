"""What the loss-scaling guess costs where it is right, measured in turns.

    python bench/guess_cost.py        # on the GPU machine, about a minute

1. Each element-wise loss's training step at 2^28 elements, plain and with the loss multiplied
   by 1024 (a right guess from the second step on), timed in turns (``TURNS`` of each,
   alternating, so that a drift of the GPU's clock falls on both), and each step's kernels
   from the profiler. (Timed one after the other, chapter 6 once measured Hinge's x1024
   step at 1.11x; in turns it is 1.006x: bench/PERFLOG.md, session 19.)
2. Version 4's fp32 forward+backward at 4096 x 131072 with the guess and without it
   (``grad_guess.wanted`` patched to False), both with ``loss.backward()``: the guess's read.
   Reading the guess beside the mean's count in every row cost 2-2.5% until the two became
   one factor, computed once per call (``gradient_factor`` in version 3).

Prints each ratio (median of the turns) with PASS/MISS against what the guess should cost:
a right guess at most 1.02x the plain step, and the guess's read at most 1.01x.
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench, results
from kernels.build.loader import load
from kernels.losses import ELEMENT_WISE, get_loss
from kernels.ops import grad_guess, operators
from kernels.ops.cross_entropy import cross_entropy
from kernels.ops.llm_head import LLM_CE_FILE

TURNS = 5
ELEMENTS = 1 << 28
CE_SHAPE = (4096, 131072)
RIGHT_GUESS_RATIO = 1.02  # x1024 / x1 when the guess is right: a few tiny launches more
READ_RATIO = 1.01  # with / without the guess: one float read per block


def ratio_line(times: dict, over: str, under: str, goal: float, label: str) -> bool:
    ratio = statistics.median(times[over]) / statistics.median(times[under])
    turns = ", ".join(f"{name} " + " ".join(f"{t:.4f}" for t in ts) for name, ts in times.items())
    print(f"{'PASS' if ratio <= goal else 'MISS'}  {label}: {ratio:.3f} (<= {goal}); ms: {turns}")
    return ratio <= goal


def element_wise(ops) -> list[bool]:
    verdicts = []
    for name in ELEMENT_WISE:
        shape = bench.element_wise_shape(ELEMENTS, name)
        gen = torch.Generator(device="cuda").manual_seed(0)
        arg_sets = []
        for _ in range(2):  # 2^28 fp32: 1 GiB per input, far beyond L2
            pred, target = get_loss(name).make_inputs(shape, gen, "cuda")
            arg_sets.append((pred.requires_grad_(), target))
        loss = getattr(ops, name)
        fns = {"x1": bench.training_step(loss),
               "x1024": bench.training_step(loss, scales=(1024.0,))}
        times = bench.in_turns(fns, arg_sets, TURNS)
        verdicts.append(ratio_line(times, "x1024", "x1", RIGHT_GUESS_RATIO,
                                   f"{name} fwd+bwd {results.shape_text(shape)} fp32, "
                                   "x1024 / x1"))
        for label, fn in fns.items():
            bench.kernel_times(f"{name} {label}", fn, arg_sets[0])
        del arg_sets
        torch.cuda.empty_cache()
    return verdicts


def cross_entropy_read() -> bool:
    v4 = load(LLM_CE_FILE)
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(CE_SHAPE, generator=gen, device="cuda").requires_grad_()
    target = torch.randint(0, CE_SHAPE[1], (CE_SHAPE[0],), generator=gen, device="cuda")
    with_guess = bench.training_step(lambda x, t: cross_entropy(x, t, kernel=v4))
    without_guess = bench.patched(with_guess, grad_guess, "wanted", lambda *_: False)
    times = bench.in_turns({"guess": with_guess, "no guess": without_guess},
                           [(logits, target)], TURNS)
    return ratio_line(times, "guess", "no guess", READ_RATIO,
                      f"v4 fwd+bwd {CE_SHAPE[0]} x {CE_SHAPE[1]} fp32, guess / no guess")


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    require_gpus(1, "bench/guess_cost.py")
    print(torch.cuda.get_device_name())
    verdicts = element_wise(operators.build())
    verdicts.append(cross_entropy_read())
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
