"""Chapter 6: the course's kernels as PyTorch operators (``torch.library``).

``kernels.load`` registers every launcher of a kernel file as an op with ``TORCH_LIBRARY``: a
schema and a CUDA kernel. That is enough to call it, not to use it where PyTorch's own ops work.
Two more registrations make it an operator, and :func:`register` adds both for every op of a
built kernel, chosen by the binding its launchers use:

- a **fake kernel** (``torch.library.register_fake``): the outputs' shapes and dtypes, computed
  without touching data, so that ``torch.compile`` can trace the op with fake tensors;
- an **autograd formula** (``torch.library.register_autograd``): what ``backward()`` runs.

``kernels.load`` calls :func:`register` once per build: the ops package installs it as the
build's hook (``kernels.build.loader.ON_BUILD``), so the build itself knows nothing of autograd.
Every build has its own namespace (its name holds a hash of its sources), so running a notebook
cell again registers nothing twice, and an edited kernel file gets a namespace of its own.

:class:`LossOps` are the functions a training loop calls, with PyTorch's arguments::

    ops = kernels.ops.operators.build()    # the chapter's final kernels
    loss = ops.mse(pred, target)           # F.mse_loss(pred, target)
    loss = ops.cross_entropy(logits, target, label_smoothing=0.1)
"""

from __future__ import annotations

import torch

from ..losses import ELEMENT_WISE, get_loss
from . import grad_guess
from .schema import (CROSS_ENTROPY_FILE, FUSED_LOSSES_FILE, REDUCTIONS, SAVE_GRAD, SAVE_LSE,
                     qualname)

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALE_GRAD = "_scale_grad"  # the suffix of the backward op a fused-loss kernel file defines


def register(kernel, struct: str) -> None:
    """Give every op of a freshly built kernel its fake kernel and its autograd formula."""
    {"ReductionArgs": _register_forward_only,
     "FusedLossArgs": _register_fused_losses,
     "CrossEntropyArgs": _register_cross_entropy,
     "VocabShardArgs": _register_vocab_shard}[struct](kernel)


def _no_backward(source: str):
    def backward(ctx, *grads):
        raise NotImplementedError(
            f"{source} computes the loss only: its chapter builds forward kernels. For a gradient "
            f"use the operators of chapter 6 (kernels.operators.build()).")
    return backward


# --- chapters 2-4: forward kernels, op(pred, target) -> 0-d ----------------------------------

def _register_forward_only(kernel) -> None:
    for op in kernel.ops:
        name = qualname(kernel, op)
        torch.library.register_fake(name, lambda pred, target: pred.new_empty(()))
        # Without a formula, backward() would leave .grad None after a warning; this raises.
        torch.library.register_autograd(name, _no_backward(kernel.source))


# --- chapter 6: fused losses, op(pred, target, reduction, param, want_grad, grad_guess) -------
#                                -> (loss, grad)

def _fake_scale_grad(grad, grad_output, grad_guess=None):
    """A scale op's result: the next guess of grad_output (kernels/ops/grad_guess.py)."""
    return grad.new_empty((), dtype=torch.float32)


def _fake_fused_loss(pred, target, reduction, param, want_grad, grad_guess=None):
    loss = pred.new_empty(pred.shape if reduction == REDUCTIONS["none"] else ())
    grad = pred.new_empty(pred.shape if want_grad else (0,))
    return loss, grad


def _register_fused_losses(kernel) -> None:
    scale_ops = [op for op in kernel.ops if op.endswith(SCALE_GRAD)]
    if len(scale_ops) != 1:
        raise ValueError(f"{kernel.source} must define exactly one <name>{SCALE_GRAD}_launch "
                         f"(the backward), found {scale_ops}")
    scale_grad = kernel.ops[scale_ops[0]]
    torch.library.register_fake(qualname(kernel, scale_ops[0]), _fake_scale_grad)
    for op in kernel.ops:
        if op == scale_ops[0]:
            continue
        name = qualname(kernel, op)
        torch.library.register_fake(name, _fake_fused_loss)
        setup, backward = _fused_loss_autograd(kernel.ops[op], scale_grad, op, name)
        torch.library.register_autograd(name, backward, setup_context=setup)


def _fused_loss_autograd(forward, scale_grad, loss_name: str, registered: str):
    """setup_context and backward of one fused loss op.

    The forward wrote d loss / d pred times the guess of grad_output (1 without one; when
    want_grad): the backward multiplies it in place by grad_output / guess, and for "mean" and
    "sum" on the GPU, with nothing to do when that is 1 (kernels/ops/grad_guess.py). Under
    torch.compile the saved gradient is a functional tensor that may not be written to: the
    backward multiplies out of place there, and there is no guess. Called with want_grad=False,
    the backward runs the op again to get the gradient (correct, but a second read of the
    inputs: LossOps sets want_grad whenever an input requires grad).
    """
    def setup_context(ctx, inputs, output):
        pred, target, reduction, param, want_grad, guess = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # no zeros for the gradient output nobody differentiates
        ctx.reduction, ctx.param, ctx.want_grad = reduction, param, want_grad
        ctx.guess, ctx.device = guess, pred.device
        ctx.n, ctx.target_shape = pred.numel(), target.shape
        ctx.backward_done = False
        target_grad = ctx.needs_input_grad[1]
        ctx.save_for_backward(output[1] if want_grad else None,
                              pred if target_grad or not want_grad else None,
                              target if target_grad or not want_grad else None)

    def backward(ctx, grad_loss, _):
        if grad_loss is None:
            return None, None, None, None, None, None
        grad, pred, target = ctx.saved_tensors
        if not ctx.want_grad:
            grad = forward(pred, target, ctx.reduction, ctx.param, True)[1]
        elif ctx.backward_done:
            raise RuntimeError("this loss's gradient was scaled in place by a first backward; "
                               "compute the loss again for a second one (retain_graph=True "
                               "cannot reuse it)")
        ctx.backward_done = True
        if ctx.reduction == REDUCTIONS["none"] and type(grad) is torch.Tensor:
            grad.mul_(grad_loss)  # one grad_output per element: no guess
        else:
            grad = grad_guess.scale(grad, grad_loss, ctx.guess, scale_grad, registered, ctx.device)
        grad_target = None
        if ctx.needs_input_grad[1]:
            upstream = grad_loss / ctx.n if ctx.reduction == REDUCTIONS["mean"] else grad_loss
            loss = get_loss(loss_name)
            if loss.target_grad is None:
                raise NotImplementedError(
                    f"{loss_name}: no gradient for the target in kernels/losses.py")
            param = {loss.param[0]: ctx.param} if loss.param else {}
            grad_target = loss.target_grad(pred, target, grad, upstream, **param).sum_to_size(
                ctx.target_shape)
        return (grad if ctx.needs_input_grad[0] else None), grad_target, None, None, None, None

    return setup_context, backward


# --- chapter 5's cross-entropy ops ------------------------------------------------------------


def _fake_cross_entropy(logits, target, ignore_index, reduction, label_smoothing, save,
                        grad_guess=None):
    rows, classes = logits.shape
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    loss = logits.new_empty((rows,) if reduction == REDUCTIONS["none"] else ())
    if save == SAVE_GRAD:
        saved = logits.new_empty((rows, classes))
    else:
        saved = logits.new_empty((rows,) if save == SAVE_LSE and rows else (0,), dtype=acc)
    return loss, saved, logits.new_empty((), dtype=torch.int32)


def _register_cross_entropy(kernel) -> None:
    ops = kernel.ops
    name = qualname(kernel, "cross_entropy")
    torch.library.register_fake(name, _fake_cross_entropy)
    if "cross_entropy_backward" in ops and "cross_entropy_scale_grad" in ops:
        torch.library.register_fake(qualname(kernel, "cross_entropy_backward"),
                                    lambda grad_output, logits, *rest: torch.empty_like(
                                        logits, memory_format=torch.contiguous_format))
        torch.library.register_fake(qualname(kernel, "cross_entropy_scale_grad"),
                                    _fake_scale_grad)
        setup, backward = _cross_entropy_autograd(ops, name)
        torch.library.register_autograd(name, backward, setup_context=setup)
    else:
        torch.library.register_autograd(name, _no_backward(kernel.source))
    if "cross_entropy_into_logits" in ops:  # chapter 7: used inside the fused head's own op
        torch.library.register_fake(qualname(kernel, "cross_entropy_into_logits"),
                                    lambda logits, *rest: logits.new_empty(()))


def _cross_entropy_autograd(ops, registered: str):
    """setup_context and backward of a chapter 5 cross-entropy op (kernels/ops/cross_entropy.py).

    save == SAVE_GRAD: the forward wrote the gradient times the guess of grad_output (1 without
    one: kernels/ops/grad_guess.py), scaled here in place by grad_output / guess (on the GPU,
    nothing when that is 1). save == SAVE_LSE: the backward op reads the
    logits again with the saved log-sum-exp. save == SAVE_NOTHING: the forward runs again,
    saving the log-sum-exp.
    """
    def setup_context(ctx, inputs, output):
        logits, target, ignore_index, reduction, label_smoothing, save, guess = inputs
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.guess, ctx.device = guess, logits.device
        ctx.set_materialize_grads(False)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        ctx.label_smoothing = label_smoothing
        ctx.save, ctx.backward_done = save, False
        if save == SAVE_GRAD:
            ctx.save_for_backward(output[1])
        elif save == SAVE_LSE:
            ctx.save_for_backward(logits, target, output[1])
        else:
            ctx.save_for_backward(logits, target)

    def backward(ctx, grad_loss, _saved, _bad):
        none = (None,) * 6
        if grad_loss is None:
            return (None,) + none
        if ctx.save == SAVE_GRAD:
            if ctx.backward_done:
                raise RuntimeError(
                    "the fused cross-entropy scales its gradient in place, so it can be "
                    "differentiated once; recompute the loss, or pass fused_backward=False for "
                    "retain_graph=True / gradcheck")
            ctx.backward_done = True
            (grad,) = ctx.saved_tensors
            grad_loss = grad_loss.to(grad.dtype).reshape(())
            return (grad_guess.scale(grad, grad_loss, ctx.guess, ops["cross_entropy_scale_grad"],
                                     registered, ctx.device),) + none
        if ctx.save == SAVE_LSE:
            logits, target, lse = ctx.saved_tensors
        else:
            logits, target = ctx.saved_tensors
            lse = ops["cross_entropy"](logits, target, ctx.ignore_index, REDUCTIONS["none"],
                                       ctx.label_smoothing, SAVE_LSE)[1]
        rows = logits.shape[0]
        grad_loss = grad_loss.to(logits.dtype)
        if ctx.reduction == REDUCTIONS["mean"]:  # no host sync: the count stays on the GPU
            grad_loss = grad_loss / (target != ctx.ignore_index).sum()
        per_row = grad_loss.reshape(-1).expand(rows).contiguous()
        grad = ops["cross_entropy_backward"](per_row, logits, target, lse, ctx.ignore_index,
                                             ctx.label_smoothing)
        return (grad,) + none

    return setup_context, backward


# --- chapter 8's vocab-parallel pieces: shard_stats -> (rows, 4), shard_grad -> grad ----------

def _register_vocab_shard(kernel) -> None:
    """Fake kernels only: the autograd formula needs the all-reduces between the two ops, so it
    lives in kernels/ops/vocab_parallel.py (a torch.autograd.Function around both)."""
    for op in kernel.ops:
        if op.endswith("_grad"):
            fake = lambda logits, *rest: torch.empty_like(logits,  # noqa: E731
                                                          memory_format=torch.contiguous_format)
        else:
            fake = lambda logits, *rest: logits.new_empty((logits.shape[0], 4),  # noqa: E731
                                                          dtype=torch.float32)
        torch.library.register_fake(qualname(kernel, op), fake)


# --- what a training loop calls ---------------------------------------------------------------

class LossOps:
    """The operators of a fused-loss kernel file and a cross-entropy kernel file, called with
    PyTorch's arguments. Every function works in ``backward()``, under ``torch.compile``
    (no graph break) and CUDA graphs, in float32, bfloat16 and float16.

    One method per element-wise loss of the registry (``ops.mse``, ``ops.smooth_l1(p, t,
    beta=0.5)``, ...: :func:`_loss_method`), and ``ops.cross_entropy``."""

    def __init__(self, element_wise, cross_entropy=None):
        self.element_wise = element_wise
        self.cross_entropy_kernel = cross_entropy

    def loss(self, name: str, pred, target, reduction: str = "mean", param: float = 0.0):
        """The element-wise loss ``name`` (an op of the kernel file) with PyTorch's arguments."""
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}")
        if not (torch.is_tensor(pred) and torch.is_tensor(target)):
            raise TypeError("pred and target must be tensors")
        if pred.device.type != "cuda" or target.device != pred.device:
            raise RuntimeError(f"{name}: pred and target must be CUDA tensors on one device, got "
                               f"{pred.device} and {target.device}")
        if pred.dtype != target.dtype:  # PyTorch promotes: so do we (one copy of the narrower)
            dtype = torch.promote_types(pred.dtype, target.dtype)
            pred, target = pred.to(dtype), target.to(dtype)
        if pred.dtype not in DTYPES:
            raise TypeError(f"{name}: pred and target must be float32, bfloat16 or float16, got "
                            f"{pred.dtype} (for float64, use PyTorch's own loss)")
        if target.shape != pred.shape:
            target = self._broadcast_row(name, pred, target)
        want_grad = torch.is_grad_enabled() and (pred.requires_grad or target.requires_grad)
        op = self.element_wise.ops[name]
        guess = grad_guess.for_forward(qualname(self.element_wise, name), pred.device,
                                       pred.dtype, reduction != "none", want_grad)
        return op(pred, target, REDUCTIONS[reduction], float(param), want_grad, guess)[0]

    @staticmethod
    def _broadcast_row(name, pred, target):
        """A target that is one row of pred's last dimension, as a 1-D view; else an error."""
        row = target.reshape(-1) if all(s == 1 for s in target.shape[:-1]) else target
        try:
            allowed = get_loss(name).broadcast_target
        except ValueError:  # a loss of an exercise, not in kernels/losses.py
            allowed = False
        if allowed and pred.dim() >= 1 and row.dim() == 1 and row.shape[0] == pred.shape[-1]:
            return row
        raise ValueError(f"{name}: target shape {tuple(target.shape)} must equal pred shape "
                         f"{tuple(pred.shape)}" + (" or be one row of its last dimension"
                                                   if allowed else ""))

    def cross_entropy(self, logits, target, ignore_index: int = -100, reduction: str = "mean",
                      label_smoothing: float = 0.0, check_targets: bool = False):
        """``F.cross_entropy`` (class-index targets) with chapter 5's final kernel."""
        from .cross_entropy import cross_entropy

        return cross_entropy(logits, target, ignore_index, reduction, label_smoothing,
                             kernel=self.cross_entropy_kernel, check_targets=check_targets)


def _loss_method(name: str):
    """``LossOps.<name>(pred, target, reduction="mean", <param>=<default>)``: the registry's
    element-wise loss with PyTorch's arguments (its parameter by keyword, checked by its entry)."""
    loss = get_loss(name)
    keyword, default = loss.param or (None, 0.0)

    def method(self, pred, target, reduction: str = "mean", **param):
        if param.keys() - {keyword}:
            raise TypeError(f"{name}() got an unexpected keyword argument "
                            f"{sorted(param.keys() - {keyword})[0]!r}")
        value = param.get(keyword, default)
        return self.loss(name, pred, target, reduction,
                         loss.check_param(value) if loss.check_param else value)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"{name}: per element, {loss.each.__doc__.strip()} Reduced by ``reduction`` "
                      f"(\"mean\", \"sum\" or \"none\")"
                      + (f"; ``{keyword}`` defaults to {default}." if keyword else "."))
    return method


for _name in ELEMENT_WISE:
    setattr(LossOps, _name, _loss_method(_name))


def build(element_wise: str = FUSED_LOSSES_FILE,
          cross_entropy: str = CROSS_ENTROPY_FILE) -> LossOps:
    """Build (or fetch from the cache) the kernels and return their operators."""
    from ..build.loader import load

    return LossOps(load(element_wise), load(cross_entropy))

