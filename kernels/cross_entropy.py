"""The fused cross-entropy of chapter 5 as a drop-in for ``F.cross_entropy``, with autograd.

``cross_entropy(logits, target)`` computes what ``torch.nn.functional.cross_entropy`` computes for
class-index targets (int64), with ``ignore_index``, ``reduction`` ("mean", "sum", "none") and
``label_smoothing``, for float32, bfloat16, float16 and float64 logits of shape (rows, classes)
or (classes,). It runs one kernel file's ops (by default the chapter's final version)::

    loss = cross_entropy(logits, target)                       # F.cross_entropy(logits, target)
    loss = cross_entropy(logits, target, kernel="ch5_cross_entropy/v1_two_pass_row.cu")

The backward (how it avoids a second pass over the logits):

- reduction "mean" or "sum": when the logits require grad, the forward kernel also writes the
  gradient ``(softmax - one_hot) / count`` for ``grad_output == 1`` (it has the row in registers
  and knows its log-sum-exp). The backward then only multiplies by ``grad_output``, and does so
  on the GPU: a kernel reads ``grad_output`` and returns at once when it is 1 (what
  ``loss.backward()`` passes), so no host synchronisation. The gradient buffer is scaled in
  place, so the graph can be differentiated once (``retain_graph=True`` and a second backward
  raise an error).
- reduction "none" (or ``fused_backward=False``): the forward saves each row's log-sum-exp; the
  backward reads the logits again and writes ``grad_output[i] * (softmax - one_hot)`` in one
  pass (for "mean", ``grad_output / count`` with the count of rows not ignored, on the GPU).
  This path can be differentiated several times; ``torch.autograd.gradcheck`` runs on it with
  float64 logits (the kernels have a float64 path for exactly that).

Out-of-range targets: the kernels never use them as an index; the row's loss and gradient become
NaN and the forward kernel raises a flag on the GPU. With ``check_targets=True`` (the default)
the wrapper reads that flag once, after the forward (one 4-byte copy to the host, which waits
for the GPU), and raises :class:`IndexError` naming the first bad row and its value. The wait
costs no GPU time between kernels, but the host's work for the next call can no longer hide
behind queued GPU work (bench/PERFLOG.md has the measured cost). A training loop that has
validated its targets can pass ``check_targets=False``: nothing waits, and a bad target shows
up as a NaN loss, never as a read out of bounds. PyTorch itself, on CUDA, stops the process
with a device-side assert instead.
"""

from __future__ import annotations

import torch

FINAL = "ch5_cross_entropy/v3_fused_rows.cu"
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
SAVE_NOTHING, SAVE_LSE, SAVE_GRAD = 0, 1, 2


_FINAL_KERNEL = None


def _kernel(kernel):
    """A built Kernel: given, loaded from a path relative to kernels/, or the final version."""
    global _FINAL_KERNEL
    from .load import Kernel, load

    if isinstance(kernel, Kernel):
        return kernel
    if kernel is None:  # load() hashes the sources: done once, not on every call
        if _FINAL_KERNEL is None:
            _FINAL_KERNEL = load(FINAL)
        return _FINAL_KERNEL
    return load(kernel)


def _raise_if_bad(bad, target, classes, ignore_index):
    """Read the forward's flag (waits for the GPU); on a bad target, name the first one."""
    if not bad.item():
        return
    wrong = (target != ignore_index) & ((target < 0) | (target >= classes))
    row = int(wrong.nonzero()[0, 0]) if wrong.any() else -1
    value = int(target[row]) if row >= 0 else None
    raise IndexError(f"cross_entropy: target {value} of row {row} is out of range; every target "
                     f"must be in [0, {classes}) or equal ignore_index ({ignore_index})")


class CrossEntropyFunction(torch.autograd.Function):
    """Autograd for one kernel file's ``cross_entropy`` ops (see the module's docstring)."""

    @staticmethod
    def forward(ctx, logits, target, kernel, ignore_index, reduction, label_smoothing,
                check_targets, fused_backward):
        save = SAVE_NOTHING
        if ctx.needs_input_grad[0]:
            missing = {"cross_entropy_backward", "cross_entropy_scale_grad"} - set(kernel.ops)
            if missing:
                raise NotImplementedError(
                    f"{kernel.source} has no backward ({sorted(missing)} missing); "
                    f"use {FINAL} or call it under torch.no_grad()")
            fused = fused_backward and reduction != REDUCTIONS["none"]
            save = SAVE_GRAD if fused else SAVE_LSE
        loss, saved, bad = kernel.cross_entropy(logits, target, ignore_index, reduction,
                                                label_smoothing, save)
        if check_targets:
            _raise_if_bad(bad, target, logits.shape[-1], ignore_index)
        ctx.kernel, ctx.save = kernel, save
        ctx.reduction, ctx.ignore_index, ctx.label_smoothing = reduction, ignore_index, \
            label_smoothing
        ctx.backward_done = False
        if save == SAVE_LSE:
            ctx.save_for_backward(logits, target, saved)
        elif save == SAVE_GRAD:
            ctx.save_for_backward(saved)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        kernel = ctx.kernel
        if ctx.save == SAVE_GRAD:  # the forward wrote the gradient for grad_output == 1
            if ctx.backward_done:
                raise RuntimeError("the fused cross-entropy scales its gradient in place, so it "
                                   "can be differentiated once; recompute the loss, or pass "
                                   "fused_backward=False for retain_graph=True / gradcheck")
            ctx.backward_done = True
            (grad,) = ctx.saved_tensors
            grad_output = grad_output.to(grad.dtype).reshape(())
            return (kernel.cross_entropy_scale_grad(grad, grad_output),) + (None,) * 7
        logits, target, lse = ctx.saved_tensors
        rows = logits.shape[0]
        grad_output = grad_output.to(logits.dtype)
        if ctx.reduction == REDUCTIONS["mean"]:  # no host sync: count stays on the GPU
            grad_output = grad_output / (target != ctx.ignore_index).sum()
        per_row = grad_output.reshape(-1).expand(rows).contiguous()
        grad = kernel.cross_entropy_backward(per_row, logits, target, lse, ctx.ignore_index,
                                             ctx.label_smoothing)
        return (grad,) + (None,) * 7


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, kernel=None, check_targets: bool = True,
                  fused_backward: bool = True):
    """``F.cross_entropy(logits, target, ...)`` computed by a chapter 5 kernel (see the module).

    ``kernel``: a :class:`~kernels.load.Kernel`, a kernel file relative to ``kernels/``, or None
    for the final version. ``check_targets`` (default True): raise IndexError for an out-of-range
    target (reads a flag once per call, which waits for the GPU); False returns NaN for such
    rows without waiting (for targets already validated).
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
    kernel = _kernel(kernel)
    if torch.is_grad_enabled() and logits.requires_grad:
        loss = CrossEntropyFunction.apply(logits, target, kernel, int(ignore_index),
                                          REDUCTIONS[reduction], float(label_smoothing),
                                          bool(check_targets), bool(fused_backward))
    else:  # no gradient: the op alone, without autograd's bookkeeping (less host time per call)
        loss, _, bad = kernel.cross_entropy(logits, target, int(ignore_index),
                                            REDUCTIONS[reduction], float(label_smoothing),
                                            SAVE_NOTHING)
        if check_targets:
            _raise_if_bad(bad, target, logits.shape[-1], ignore_index)
    return loss.squeeze(0) if one_row and reduction == "none" else loss
