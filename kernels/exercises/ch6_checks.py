"""Checks for chapter 6's exercises: one PASS or FAIL line per case, never an exception.

``check_log_cosh(kernel)`` runs a built exercise kernel (``kernels.load("exercises/ch6_log_cosh.cu")``)
as an operator (:class:`kernels.ops.operators.LossOps`), forward and backward, and compares the
loss and the gradient with log(cosh(p - t)) computed by PyTorch in float64. The lines hold no
timing, so the solutions notebook's stored output is the same on every GPU.
"""

from __future__ import annotations

from .ch5_checks import summary  # noqa: F401  (re-exported for the notebooks)

SEED = 2026


def _relative_error(got, expected) -> float:
    from kernels.measure.correctness import relative_error

    return relative_error(got, expected)


def log_cosh_reference(pred, target):
    """log(cosh(p - t)) in a form that does not overflow: torch.log(torch.cosh(d)) is infinite
    beyond |d| = 710 even in float64. (Deriving this form is the exercise.)"""
    import math

    import torch

    a = (pred - target).abs()
    return a + torch.log1p(torch.exp(-2 * a)) - math.log(2)


def _case(ops, label, pred, target, reduction, rtol) -> bool:
    """Loss and gradient of one case against float64; print PASS or FAIL with the reason."""
    import torch

    where = f"{label:<40} {reduction:<5} {str(pred.dtype).replace('torch.', ''):<9}"
    p = pred.detach().clone().requires_grad_()
    ref_p = pred.detach().double().requires_grad_()
    expected = log_cosh_reference(ref_p, target.double())
    expected = expected.mean() if reduction == "mean" else expected.sum() \
        if reduction == "sum" else expected
    try:
        got = ops.loss("log_cosh", p, target, reduction)
        got.backward(torch.ones_like(got))
        torch.cuda.synchronize()
    except Exception as error:
        message = str(error).splitlines()[0][:120] if str(error) else ""
        print(f"FAIL  {where}: {type(error).__name__}: {message}")
        return False
    expected.backward(torch.ones_like(expected))
    for what, mine, theirs in (("loss", got, expected), ("gradient", p.grad, ref_p.grad)):
        error = _relative_error(mine, theirs)
        if not error <= rtol:
            print(f"FAIL  {where}: {what}: relative error {error:.1e} > {rtol:.0e}"
                  + (" (NaN or infinity?)" if error == float("inf") else ""))
            return False
    print(f"PASS  {where}")
    return True


def check_log_cosh(kernel) -> bool:
    """Exercise 6.1: log-cosh, forward and backward, small and huge differences, three dtypes."""
    import torch

    from kernels.ops.operators import LossOps

    ops = LossOps(kernel)
    g = torch.Generator(device="cuda").manual_seed(SEED)
    pred = torch.randn(100_003, generator=g, device="cuda")
    target = torch.randn(100_003, generator=g, device="cuda")
    ok = True
    for reduction in ("mean", "sum", "none"):
        ok &= _case(ops, "random, 100003 elements", pred, target, reduction, 1e-5)
    far = 300 * torch.randn(4_099, generator=g, device="cuda")  # cosh overflows beyond |d| = 89
    ok &= _case(ops, "differences up to ~1000 (no overflow)", far, torch.zeros_like(far),
                "mean", 1e-5)
    for dtype, rtol in ((torch.bfloat16, 2e-2), (torch.float16, 4e-3)):
        ok &= _case(ops, "random, 16-bit", pred[:4_099].to(dtype), target[:4_099].to(dtype),
                    "sum", rtol)
    return ok


__all__ = ["check_log_cosh", "log_cosh_reference", "summary"]
