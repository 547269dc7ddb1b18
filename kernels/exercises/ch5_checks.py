"""Checks for chapter 5's exercises: one PASS or FAIL line per case, never an exception.

Each ``check_*`` takes a built exercise kernel (``kernels.load("exercises/ch5_....cu")``), runs
it through the chapter's wrapper (``kernels.ops.cross_entropy.cross_entropy``) on fixed random
inputs, compares with ``F.cross_entropy`` in float64 and prints one line per case. A FAIL line
says why (wrong value, wrong NaN, an error raised); the function returns True when all passed.
The lines hold no timing, so the solutions notebook's stored output is the same on every GPU.
"""

from __future__ import annotations

SEED = 2026
RTOL = 1e-5


def _op(kernel):
    from kernels.ops.cross_entropy import cross_entropy

    def op(logits, target, **kwargs):
        return cross_entropy(logits, target, kernel=kernel, **kwargs)

    return op


def compare(op, label, logits, target, rtol=RTOL, **kwargs) -> bool:
    """One case: the op against PyTorch in float64; print PASS or FAIL with the reason."""
    import torch
    import torch.nn.functional as F

    where = f"{label:<38} {tuple(logits.shape)}"
    expected = F.cross_entropy(logits.double(), target, **kwargs)
    try:
        got = op(logits, target, **kwargs)
        torch.cuda.synchronize()
    except Exception as error:  # the skeletons may raise (e.g. an ignored target as out of range)
        message = str(error).splitlines()[0][:120] if str(error) else ""
        print(f"FAIL  {where}: {type(error).__name__}: {message}")
        return False
    if got.shape != expected.shape:
        print(f"FAIL  {where}: shape {tuple(got.shape)}, PyTorch gives {tuple(expected.shape)}")
        return False
    got = got.double().cpu()
    expected = expected.cpu()
    nan_expected = torch.isnan(expected)
    if not torch.equal(torch.isnan(got), nan_expected):
        print(f"FAIL  {where}: NaN where PyTorch has a number, or a number where PyTorch has NaN")
        return False
    got, expected = got[~nan_expected], expected[~nan_expected]
    if expected.numel():
        error = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()
        if not error <= rtol:
            print(f"FAIL  {where}: relative error {error:.1e} > {rtol:.0e}")
            return False
    print(f"PASS  {where}")
    return True


def _inputs(rows, classes, seed=SEED, scale=1.0, ignore_every=0, ignore_index=-100):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = scale * torch.randn(rows, classes, generator=generator, device="cuda")
    target = torch.randint(0, classes, (rows,), generator=generator, device="cuda")
    if ignore_every:
        target[::ignore_every] = ignore_index
    return logits, target


def check_ignore_index(kernel) -> bool:
    """Exercise 5.1: rows whose target is ignore_index add nothing; the mean counts the others."""
    op = _op(kernel)
    ok = True
    for reduction in ("mean", "sum", "none"):
        ok &= compare(op, f"every 3rd row ignored, {reduction}", *_inputs(129, 1_001, ignore_every=3),
                       reduction=reduction)
    ok &= compare(op, "ignore_index = 3 (a real class)", *_inputs(4_097, 10, ignore_every=2,
                                                                   ignore_index=3), ignore_index=3)
    ok &= compare(op, "every row ignored: the mean is NaN", *_inputs(5, 100, ignore_every=1))
    ok &= compare(op, "nothing ignored, long rows", *_inputs(7, 131_075))
    return ok


def check_online_softmax(kernel) -> bool:
    """Exercise 5.2: online softmax on random rows, large logits and rows whose max keeps rising."""
    import torch

    op = _op(kernel)
    ok = True
    ok &= compare(op, "random rows", *_inputs(33, 10))
    ok &= compare(op, "odd classes", *_inputs(129, 1_001))
    ok &= compare(op, "logits of magnitude 1e4", *_inputs(64, 1_000, scale=1e4))
    logits, target = _inputs(16, 4_099)
    rising = torch.sort(logits, dim=1).values  # every thread's max changes at each of its steps
    ok &= compare(op, "ascending rows (the max keeps rising)", rising, target)
    ok &= compare(op, "long rows", *_inputs(7, 131_075))
    return ok


def check_label_smoothing(kernel) -> bool:
    """Exercise 5.3: label smoothing, with and without ignored rows, for every reduction."""
    op = _op(kernel)
    ok = True
    ok &= compare(op, "label_smoothing 0 (unchanged)", *_inputs(129, 1_001))
    for reduction in ("mean", "sum", "none"):
        ok &= compare(op, f"label_smoothing 0.1, {reduction}", *_inputs(129, 1_001),
                       reduction=reduction, label_smoothing=0.1)
    ok &= compare(op, "label_smoothing 0.3, ignored rows", *_inputs(257, 4_096, ignore_every=5),
                   label_smoothing=0.3)
    ok &= compare(op, "label_smoothing 1.0, long rows", *_inputs(7, 131_075), label_smoothing=1.0)
    return ok


def summary(ok: bool) -> None:
    print("all cases pass" if ok else "not yet: fix the first FAIL above, then rerun this cell")


def run_exercise(source: str, check) -> bool:
    """Build an exercise kernel (a compile error prints FAIL, not a traceback) and check it."""
    from kernels.build.loader import KernelBuildError, load

    try:
        kernel = load(source)
    except KernelBuildError as error:
        print(f"FAIL  {source} did not compile:\n{error}")
        return False
    ok = check(kernel)
    summary(ok)
    return ok


__all__ = ["check_ignore_index", "check_label_smoothing", "check_online_softmax", "compare",
           "run_exercise", "summary"]
