"""The loss-scaling guess: a forward multiplies the gradient it writes by a guess of the
backward's ``grad_output``, so that a scaled loss costs no second pass over the gradient.

A training loop that scales its loss (fp16 AMP's ``GradScaler``, a loss weight) passes the same
``grad_output`` step after step, and a backward that multiplies the forward's gradient by it
reads and writes that gradient once more. So the chapter 6 losses and chapter 5's fused
cross-entropy keep, per op and device, one float32 on the GPU: the ``grad_output`` of that op's
last backward (1 at first). The forward multiplies its gradient by it; the backward's scale op
multiplies by ``grad_output / guess`` (exactly 1, and nothing to do, when the guess was right)
and returns ``grad_output`` as a new tensor, the next guess. Nothing waits on the host, and the
gradient is right whatever the guess was (``guess_factor`` in kernels/common/cuda_utils.cuh says
which guesses count as 1).

A stored guess is never written again: a forward keeps the tensor it used, and each backward
stores a new one.
"""

from __future__ import annotations

import torch

_GUESSES: dict[tuple[str, torch.device], torch.Tensor] = {}


def current(op: str, device: torch.device) -> torch.Tensor:
    """The guess of grad_output for the op named ``op`` on ``device`` (1 before its first
    backward)."""
    key = (op, device)
    if key not in _GUESSES:
        _GUESSES[key] = torch.ones((), dtype=torch.float32, device=device)
    return _GUESSES[key]


def keep(op: str, device: torch.device, guess: torch.Tensor) -> None:
    """Store the grad_output a backward saw (its scale op's result) as the next guess."""
    _GUESSES[op, device] = guess


def wanted(dtype: torch.dtype, reduced: bool, want_grad: bool) -> bool:
    """Whether a forward multiplies its gradient by the guess.

    Only for a gradient of a reduced loss ("mean" or "sum": one grad_output). Not for float16,
    where an old, larger guess could overflow a gradient that grad_output would not; not under
    torch.compile, whose backward multiplies out of place and would not keep the next guess; not
    in CUDA graph capture, where each replay would write the next guess into a tensor kept here.
    """
    return (want_grad and reduced and dtype != torch.float16
            and not torch.compiler.is_compiling()
            and not torch.cuda.is_current_stream_capturing())


def for_forward(op: str, device: torch.device, dtype: torch.dtype, reduced: bool,
                want_grad: bool) -> torch.Tensor | None:
    """The guess a forward of ``op`` multiplies its gradient by, or None where none is
    :func:`wanted`."""
    return current(op, device) if wanted(dtype, reduced, want_grad) else None


def factor(guess: torch.Tensor) -> torch.Tensor:
    """The factor a guess stands for, as ``guess_factor`` in kernels/common/cuda_utils.cuh
    computes it: for a backward traced by torch.compile, which multiplies out of place."""
    size = guess.abs()
    return torch.where((size >= 2.0**-32) & (size <= 2.0**32), guess, torch.ones_like(guess))


def scale(grad: torch.Tensor, grad_output: torch.Tensor, guess: torch.Tensor | None, scale_op,
          op: str, device: torch.device) -> torch.Tensor:
    """A forward's gradient (times ``guess``, or 1 without one) made the gradient for
    ``grad_output``: in place by the op's ``scale_op(grad, grad_output, guess)`` on the GPU, which
    returns ``grad_output``, kept as the op's next guess. Traced by torch.compile, the gradient is
    a functional tensor that may not be written to: it is multiplied out of place, by the factor
    the guess stands for, and there is no next guess."""
    if type(grad) is not torch.Tensor:
        return grad * (grad_output if guess is None else grad_output / factor(guess))
    next_guess = scale_op(grad, grad_output, guess)
    if guess is not None:
        keep(op, device, next_guess)
    return grad
