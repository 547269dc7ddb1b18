"""The fused cross-entropy of chapter 5 as a drop-in for ``F.cross_entropy``, with autograd.

``cross_entropy(logits, target)`` computes what ``torch.nn.functional.cross_entropy`` computes for
class-index targets (int64), with ``ignore_index``, ``reduction`` ("mean", "sum", "none") and
``label_smoothing``, for float32, bfloat16, float16 and float64 logits of shape (rows, classes)
or (classes,). It runs one kernel file's ops (by default the chapter's final version)::

    loss = cross_entropy(logits, target)                       # F.cross_entropy(logits, target)
    loss = cross_entropy(logits, target, kernel="ch5_cross_entropy/v1_two_pass_row.cu")

The op is a PyTorch operator (chapter 6, ``kernels/ops/operators.py`` registers its fake kernel and
its autograd formula), so it also runs under ``torch.compile`` and CUDA graphs. The backward
(how it avoids a second pass over the logits):

- reduction "mean" or "sum": when the logits require grad, the forward kernel also writes the
  gradient ``(softmax - one_hot) / count`` (it has the row in registers and knows its
  log-sum-exp), multiplied by a guess of ``grad_output``: the one this op's last backward saw
  (``kernels/ops/grad_guess.py``). The backward then only multiplies by ``grad_output / guess``,
  and does so on the GPU: a kernel reads both and returns at once when that is 1 (a scale that
  stays the same from step to step, or ``loss.backward()``'s 1), so no host synchronisation.
  The gradient buffer is scaled in place, so the graph can be differentiated once
  (``retain_graph=True`` and a second backward raise an error).
- reduction "none" (or ``fused_backward=False``): the forward saves each row's log-sum-exp; the
  backward reads the logits again and writes ``grad_output[i] * (softmax - one_hot)`` in one
  pass (for "mean", ``grad_output / count`` with the count of rows not ignored, on the GPU).
  This path can be differentiated several times; ``torch.autograd.gradcheck`` runs on it with
  float64 logits (the kernels have a float64 path for exactly that).

Out-of-range targets (not in [0, classes) and not ``ignore_index``) are never used as an index.
The final version stops on them as PyTorch does on the GPU: a device-side assertion in the
kernel that reads the target, at no cost to a correct call and with no host wait; the process's
CUDA context is lost, and the error reaches Python at the next synchronisation ("device-side
assert triggered"). Versions 1 and 2 instead return NaN for such a row and raise a flag on the
GPU that nothing reads. ``check_targets=True`` is the debugging mode: it checks the targets on
the host before the kernel runs (one more read of the targets, and a wait for the GPU) and raises
:class:`IndexError` naming the first bad row.
"""

from __future__ import annotations

import torch

from . import grad_guess
from .schema import CROSS_ENTROPY_FILE as FINAL
from .schema import REDUCTIONS, SAVE_GRAD, SAVE_LSE, SAVE_NOTHING, qualname


_FINAL_KERNEL = None


def _kernel(kernel):
    """A built Kernel: given, loaded from a path relative to kernels/, or the final version."""
    global _FINAL_KERNEL
    from ..build.loader import Kernel, load

    if isinstance(kernel, Kernel):
        return kernel
    if kernel is None:  # load() hashes the sources: done once, not on every call
        if _FINAL_KERNEL is None:
            _FINAL_KERNEL = load(FINAL)
        return _FINAL_KERNEL
    return load(kernel)


def validate_targets(target, classes: int, ignore_index: int) -> None:
    """Raise IndexError naming the first target outside [0, classes) that is not ignore_index.

    Reads a flag back from the GPU, so it waits for it: a debugging aid, not for every step.
    """
    wrong = (target != ignore_index) & ((target < 0) | (target >= classes))
    if wrong.any():
        row = int(wrong.nonzero()[0, 0])
        raise IndexError(f"cross_entropy: target {int(target[row])} of row {row} is out of range; "
                         f"every target must be in [0, {classes}) or equal ignore_index "
                         f"({ignore_index})")


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, kernel=None, check_targets: bool = False,
                  fused_backward: bool = True):
    """``F.cross_entropy(logits, target, ...)`` computed by a chapter 5 kernel (see the module).

    ``kernel``: a built :class:`~kernels.build.loader.Kernel`, a kernel file relative to
    ``kernels/``, or None for the final version. ``check_targets``: check the targets on the host first and raise
    IndexError for an out-of-range one (waits for the GPU); by default nothing waits, and the
    final version stops on a bad target with a device-side assertion, as PyTorch does.
    ``fused_backward``: for "mean"/"sum", write the gradient during the forward (one read of the
    logits in all); False saves the log-sum-exp instead and reads the logits again in the
    backward, which can then run more than once (``retain_graph=True``, ``gradcheck``).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if not torch.is_tensor(target) or target.dtype != torch.int64:
        raise TypeError("target must be an int64 tensor of class indices (as PyTorch's); "
                        f"got {getattr(target, 'dtype', type(target))}")
    one_row = logits.dim() == 1
    if one_row:  # PyTorch accepts (C,) logits with a 0-d target
        if target.dim() != 0:
            raise ValueError(f"1-D logits take a 0-d target, got shape {tuple(target.shape)}")
        logits, target = logits.unsqueeze(0), target.unsqueeze(0)
    elif logits.dim() != 2:
        raise ValueError("logits must be (rows, classes) or (classes,); for (N, C, d1, ...) move "
                         f"the class dimension last and flatten; got shape {tuple(logits.shape)}")
    if check_targets:
        validate_targets(target, logits.shape[-1], ignore_index)
    built = _kernel(kernel)
    ops = built.ops
    save, guess = SAVE_NOTHING, None
    if torch.is_grad_enabled() and logits.requires_grad and "cross_entropy_scale_grad" in ops:
        fused = fused_backward and reduction != "none"
        save = SAVE_GRAD if fused else SAVE_LSE
        guess = grad_guess.for_forward(qualname(built, "cross_entropy"), logits.device,
                                       logits.dtype, fused, True)
    loss = ops["cross_entropy"](logits, target, int(ignore_index), REDUCTIONS[reduction],
                                float(label_smoothing), save, guess)[0]
    return loss.squeeze(0) if one_row and reduction == "none" else loss
