"""The registry of losses: each declared once, as PyTorch defines it.

An entry of :data:`LOSSES` holds a loss's float64 reference, its inputs, the irregular shapes it
is checked on, the bytes it must read and, for an element-wise loss, its per-element expression,
its parameter, the gradient of its target and the CUDA functor of ``common/losses.cuh`` that
computes it. Everything else takes a loss from here: the checks, the benchmarks, the tests, the
final kernels' launchers (``kernels.build.codegen`` defines ``KERNELS_ELEMENT_WISE_LOSSES`` for
chapter 6's kernel file) and their operators (``kernels.ops.operators.LossOps``). A new
element-wise loss is a functor in ``common/losses.cuh`` and an entry here (CONTRIBUTING.md).

The lowest layer of the toolkit: it imports nothing of it (PyTorch only inside its functions),
and every other layer reads it (``kernels.LAYERS``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


def mse(pred, target):
    import torch

    return torch.mean((pred - target) ** 2)


def smooth_l1(pred, target):
    import torch.nn.functional as F

    return F.smooth_l1_loss(pred, target)  # beta = 1


def hinge(pred, target):
    import torch

    return torch.mean(torch.clamp(1 - pred * target, min=0))


def cross_entropy(logits, target, **kwargs):
    import torch.nn.functional as F

    return F.cross_entropy(logits, target, **kwargs)


# The per-element losses (no reduction), for the operators of chapter 6: their reductions
# ("mean", "sum", "none") and, through autograd in float64, their reference gradients.
def mse_each(pred, target):
    """``(pred - target) ** 2``, as ``F.mse_loss(..., reduction="none")``."""
    return (pred - target) ** 2


def smooth_l1_each(pred, target, beta=1.0):
    """``F.smooth_l1_loss(pred, target, reduction="none", beta=beta)``."""
    import torch.nn.functional as F

    return F.smooth_l1_loss(pred, target, reduction="none", beta=beta)


def hinge_each(pred, target):
    """``torch.clamp(1 - pred * target, min=0)``; target: pred's shape or one row of its last
    dimension (KernelBench's (N, D) predictions with (D,) labels)."""
    import torch

    return torch.clamp(1 - pred * target, min=0)


def bce_with_logits(logits, target):
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(logits, target)


def bce_with_logits_each(logits, target, pos_weight=1.0):
    """``F.binary_cross_entropy_with_logits(logits, target, reduction="none",
    pos_weight=pos_weight)`` for a scalar ``pos_weight``."""
    import torch
    import torch.nn.functional as F

    weight = torch.tensor(pos_weight, dtype=logits.dtype, device=logits.device)
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none", pos_weight=weight)


def reduce(values, reduction: str):
    """PyTorch's ``reduction`` argument: "mean", "sum" or "none"."""
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    if reduction == "none":
        return values
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# d loss / d target, element by element, given d loss / d pred (grad_pred) and what multiplies
# each element's own derivative (upstream: grad_output, divided by n for the mean).
# The loss's parameter, if any, comes as a keyword (beta=..., pos_weight=...).
def _minus_grad(pred, target, grad_pred, upstream, **param):
    """A loss of (pred - target): minus the prediction's gradient."""
    return -grad_pred


def _hinge_target_grad(pred, target, grad_pred, upstream):
    """clamp(1 - p y, min=0): -p where the clamp passes the gradient (1 - p y >= 0), else 0."""
    import torch

    return torch.where(1 - pred * target >= 0, -pred, 0) * upstream


def _bce_target_grad(logits, target, grad_pred, upstream, pos_weight=1.0):
    """(1 - y) x + (1 + (w - 1) y) softplus(-x): d/dy = -x + (w - 1) softplus(-x)."""
    import torch.nn.functional as F

    return (-logits + (pos_weight - 1) * F.softplus(-logits)) * upstream


def _non_negative_beta(beta):
    if beta < 0:  # F.smooth_l1_loss refuses it too
        raise ValueError(f"smooth_l1: beta must be >= 0, got {beta}")
    return beta


def _scalar_pos_weight(pos_weight):
    """PyTorch's default None is a weight of 1; a tensor of one weight per class is not a kernel
    parameter (a float), so it is refused rather than silently reduced."""
    if pos_weight is None:
        return 1.0
    if isinstance(pos_weight, bool) or not isinstance(pos_weight, (int, float)):
        raise TypeError("bce_with_logits: pos_weight must be a Python number here (a tensor of "
                        "one weight per class is not supported by this kernel)")
    return pos_weight


def _bce_inputs(shape, generator, device="cuda", dtype=None):
    """Logits around 0 (a few units) and targets that are probabilities in [0, 1]."""
    import torch

    dtype = dtype or torch.float32
    logits = 3 * torch.randn(shape, generator=generator, device=device, dtype=dtype)
    return logits, torch.rand(shape, generator=generator, device=device, dtype=dtype)


def _element_wise_inputs(shape, generator, device="cuda", dtype=None):
    import torch

    pred = torch.randn(shape, generator=generator, device=device, dtype=dtype or torch.float32)
    target = torch.randn(shape, generator=generator, device=device, dtype=dtype or torch.float32)
    return pred, target


def _hinge_inputs(shape, generator, device="cuda", dtype=None):
    """Predictions of ``shape`` and labels in {-1, +1} of shape ``shape[-1:]``.

    KernelBench gives predictions (N, N) and targets (N,): PyTorch broadcasts from the right, so
    element [i, j] is paired with target[j]. Our kernels reproduce exactly that.
    """
    import torch

    dtype = dtype or torch.float32
    pred = torch.randn(shape, generator=generator, device=device, dtype=dtype)
    labels = torch.randint(0, 2, shape[-1:], generator=generator, device=device)
    return pred, (labels * 2 - 1).to(dtype)


def _cross_entropy_inputs(shape, generator, device="cuda", dtype=None):
    import torch

    rows, classes = shape
    logits = torch.randn(shape, generator=generator, device=device, dtype=dtype or torch.float32)
    target = torch.randint(0, classes, (rows,), generator=generator, device=device)
    return logits, target


@dataclass(frozen=True)
class Loss:
    name: str
    reference: Callable  # the PyTorch expression, also the float64 reference on upcast inputs
    make_inputs: Callable  # (shape, torch.Generator, device, dtype) -> (input, target)
    check_shapes: tuple  # the irregular shapes of the check suite, with a label each
    # For the operators of chapter 6 (element-wise losses only):
    each: Callable | None = None  # the loss of every element, PyTorch's expression
    functor: str | None = None  # its functor in common/losses.cuh (value and derivative)
    param: tuple | None = None  # (name, default) of the loss's parameter, e.g. ("beta", 1.0)
    check_param: Callable | None = None  # the given parameter -> the kernel's float, or raises
    broadcast_target: bool = False  # the target may be one row shared by every row of pred
    target_grad: Callable | None = None  # (pred, target, grad_pred, upstream) -> d loss / d target

    def reference_reduced(self, pred, target, reduction="mean", **param):
        """The loss with PyTorch's ``reduction`` and parameter (chapter 6's reference)."""
        return reduce(self.each(pred, target, **param), reduction)

    def min_bytes(self, shape, element_size=4) -> int:
        """The fewest bytes this loss must read from memory: each input once, nothing else."""
        n = math.prod(shape)
        if self.each is not None:  # element-wise: the prediction, and the target or its row
            return (n + (shape[-1] if self.broadcast_target else n)) * element_size
        if self.name == "cross_entropy":
            return n * element_size + shape[0] * 8  # logits + int64 targets
        raise ValueError(self.name)

    def reference64(self, inputs, **kwargs):
        """The loss in float64 (targets that are class indices stay int64)."""
        import torch

        upcast = [x.double() if x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            return self.reference(*upcast, **kwargs)


_ELEMENT_WISE_SHAPES = (
    ("1 element", (1,)),
    ("below one block", (100,)),
    ("a few blocks, one of them partial", (3_001,)),
    ("not a multiple of the block", (100_003,)),
    ("2-D, odd sizes", (257, 1_031)),
    ("large, odd", ((1 << 22) + 7,)),
)

LOSSES = {
    "mse": Loss("mse", mse, _element_wise_inputs, _ELEMENT_WISE_SHAPES, each=mse_each,
                functor="MseLoss", target_grad=_minus_grad),
    "smooth_l1": Loss("smooth_l1", smooth_l1, _element_wise_inputs, _ELEMENT_WISE_SHAPES,
                      each=smooth_l1_each, functor="SmoothL1Loss", param=("beta", 1.0),
                      check_param=_non_negative_beta, target_grad=_minus_grad),
    "hinge": Loss("hinge", hinge, _hinge_inputs, (
        ("1 x 1", (1, 1)),
        ("rows below one block", (3, 100)),
        ("a few blocks of rows", (3, 1_000)),
        ("square, odd (KernelBench shape)", (1_031, 1_031)),
        ("rows not a multiple of 4", (700, 1_001)),
        ("large", (2_049, 2_048)),
    ), each=hinge_each, functor="HingeLoss", broadcast_target=True,
       target_grad=_hinge_target_grad),
    "bce_with_logits": Loss("bce_with_logits", bce_with_logits, _bce_inputs, _ELEMENT_WISE_SHAPES,
                            each=bce_with_logits_each, functor="BceWithLogitsLoss",
                            param=("pos_weight", 1.0), check_param=_scalar_pos_weight,
                            target_grad=_bce_target_grad),
    "cross_entropy": Loss("cross_entropy", cross_entropy, _cross_entropy_inputs, (
        ("1 row, 1 class", (1, 1)),
        ("few classes", (33, 10)),
        ("odd classes", (129, 1_001)),
        ("many rows", (4_097, 128)),
        ("long rows", (7, 131_075)),
    )),
}


# The losses that are one value per element: chapter 6's launchers and operators, its tests and
# benchmarks.
ELEMENT_WISE = tuple(name for name, loss in LOSSES.items() if loss.each is not None)


def get_loss(name: str) -> Loss:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose from {sorted(LOSSES)}") from None
