"""Chapter 7: a language model's output layer and its loss, without ever storing the logits.

``linear_cross_entropy(hidden, weight, target)`` computes
``F.cross_entropy(hidden @ weight.T, target)`` (a bias-free LM head, as in Llama, Qwen and GPT-2's
tied embedding), with ``ignore_index``, ``reduction`` ("mean" or "sum") and ``label_smoothing``,
and its gradients for ``hidden`` and ``weight``::

    loss = linear_cross_entropy(hidden, lm_head.weight, target)   # hidden: (tokens, H)
    loss.backward()

Why: at T = 8192 tokens and a 128256-token vocabulary the bf16 logits alone are 2 GiB, and their
gradient 2 GiB more. Here the tokens go through in chunks of ``chunk_rows`` rows (by default as
many as fit in ``CHUNK_BYTES``), and for each chunk, in the forward:

1. ``logits = hidden_chunk @ weight.T`` (cuBLAS) into one scratch buffer reused by every chunk;
2. chapter 7's cross-entropy kernel reads the logits once and writes the gradient of the chunk's
   loss (reduction "sum") over them, in place (``cross_entropy_into_logits``);
3. ``grad_hidden[chunk] = dlogits @ weight`` and ``grad_weight += dlogits.T @ hidden_chunk``
   (for the mean, the kernel of step 2 has multiplied dlogits by 1 / (number of counted tokens),
   a count that stays on the GPU).

The gradients are thus ready when the forward ends; ``backward()`` multiplies them by its
``grad_output`` in place (nothing to do when it is 1, the usual case, decided on the GPU) and can
run once. The op is a ``torch.library`` custom op with a fake kernel and an autograd formula, so
it runs under ``torch.compile``. The price of the chunks: ``grad_weight`` (V x H) is read and
written once per chunk, which is why chunks are as large as the memory budget allows.
"""

from __future__ import annotations

import torch

from .schema import REDUCTIONS, SAVE_NOTHING

LLM_CE_FILE = "ch7_llm_cross_entropy/v4_cluster_rows.cu"
CHUNK_BYTES = 251 * 2**20  # the scratch logits of one chunk: the memory this op adds
# Chunk sizes in whole tiles of the matrix products: 896 rows ran 7-11% slower than 1024 at
# V=128256, H=4096 (cuBLAS's tiles; bench/PERFLOG.md).
ROW_MULTIPLE = 128

_KERNEL = None


def _ops():
    global _KERNEL
    if _KERNEL is None:
        from ..build.loader import load

        _KERNEL = load(LLM_CE_FILE)
    return _KERNEL.ops


def default_chunk_rows(vocab: int, element_size: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """The most rows (a multiple of 128, at least 128) whose logits fit in ``chunk_bytes``."""
    rows = chunk_bytes // (vocab * element_size) // ROW_MULTIPLE * ROW_MULTIPLE
    return max(rows, ROW_MULTIPLE)


@torch.library.custom_op("course_llm::linear_cross_entropy", mutates_args=())
def _linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                          ignore_index: int, reduction: int, label_smoothing: float,
                          chunk: int, with_grad: bool
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ops = _ops()
    rows = hidden.shape[0]
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    # 1 / count for the mean, on the GPU: no host synchronisation.
    counted = (target != ignore_index).sum()
    scale = (1.0 / counted if reduction == REDUCTIONS["mean"] else torch.ones_like(total))
    scale = scale.to(torch.float32)
    grad_hidden = torch.empty_like(hidden) if with_grad else hidden.new_empty(0)
    grad_weight = torch.empty_like(weight) if with_grad else weight.new_empty(0)
    scratch = hidden.new_empty((min(chunk, rows), weight.shape[0]))
    # The cross-entropy kernel multiplies the gradient it writes by 1 / count (read on the GPU),
    # so the products below need no scaling, and grad_weight no pass of its own at the end (2.3
    # ms at V=128256, H=4096 on an H100; bench/PERFLOG.md). Not in float16, where softmax / count
    # can fall below its smallest value: that gradient is scaled after the products, by 0 for
    # the mean of no tokens (1 / 0 = inf would make 0 * inf = NaN; PyTorch's gradients are 0).
    factor = scale if hidden.dtype != torch.float16 else None
    after = scale.nan_to_num(posinf=0.0) if factor is None else None
    for start in range(0, rows, chunk):
        end = min(start + chunk, rows)
        h, t, logits = hidden[start:end], target[start:end], scratch[:end - start]
        torch.mm(h, weight.t(), out=logits)
        if not with_grad:
            total += ops["cross_entropy"](logits, t, ignore_index, REDUCTIONS["sum"],
                                          label_smoothing, SAVE_NOTHING)[0].float()
            continue
        total += ops["cross_entropy_into_logits"](logits, t, ignore_index, REDUCTIONS["sum"],
                                                  label_smoothing, factor).float()
        if start == 0:  # logits now hold dloss/dlogits
            torch.mm(logits.t(), h, out=grad_weight)
        else:
            grad_weight.addmm_(logits.t(), h)
        torch.mm(logits, weight, out=grad_hidden[start:end])
        if factor is None:
            grad_hidden[start:end].mul_(after)
    if with_grad and factor is None:
        grad_weight.mul_(after)
    return (total * scale).to(hidden.dtype), grad_hidden, grad_weight


@_linear_cross_entropy.register_fake
def _(hidden, weight, target, ignore_index, reduction, label_smoothing, chunk, with_grad):
    if with_grad:
        return hidden.new_empty(()), torch.empty_like(hidden), torch.empty_like(weight)
    return hidden.new_empty(()), hidden.new_empty(0), weight.new_empty(0)


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(output[1], output[2])
    ctx.backward_done = False


def _backward(ctx, grad_loss, _grad_hidden, _grad_weight):
    none = (None,) * 6
    if grad_loss is None:
        return (None, None) + none
    if ctx.backward_done:
        raise RuntimeError("linear_cross_entropy computes its gradients in the forward and scales "
                           "them in place: it can be differentiated once")
    ctx.backward_done = True
    grad_hidden, grad_weight = ctx.saved_tensors
    if grad_hidden.numel() == 0 and grad_weight.numel() == 0:
        raise RuntimeError("linear_cross_entropy ran without gradients (no input required grad)")
    grad_loss = grad_loss.to(grad_hidden.dtype).reshape(())
    if type(grad_hidden) is not torch.Tensor:  # traced by torch.compile: no in-place writes
        return (grad_hidden * grad_loss, grad_weight * grad_loss) + none
    for grad in (grad_hidden, grad_weight):  # on the GPU; returns at once when grad_loss is 1
        _ops()["cross_entropy_scale_grad"](grad, grad_loss)
    return (grad_hidden, grad_weight) + none


_linear_cross_entropy.register_autograd(_backward, setup_context=_setup_context)


def linear_cross_entropy(hidden, weight, target, ignore_index: int = -100,
                         reduction: str = "mean", label_smoothing: float = 0.0,
                         chunk_rows: int | None = None):
    """``F.cross_entropy(hidden @ weight.T, target, ...)`` without the logits (see the module).

    ``hidden``: (..., H) CUDA tensor of float32, bfloat16 or float16; ``weight``: (V, H) of the same
    dtype and device; ``target``: int64 class indices of ``hidden``'s leading shape. Out-of-range
    targets stop the kernel with a device-side assertion, as PyTorch's own kernels do.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    for name, x in (("hidden", hidden), ("weight", weight), ("target", target)):
        if not torch.is_tensor(x) or not x.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor, got {getattr(x, 'device', type(x))}")
    if hidden.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"hidden must be float32, bfloat16 or float16, got {hidden.dtype}")
    if weight.dtype != hidden.dtype or weight.device != hidden.device:
        raise TypeError(f"weight must match hidden's dtype and device ({hidden.dtype} on "
                        f"{hidden.device}), got {weight.dtype} on {weight.device}")
    if target.dtype != torch.int64:
        raise TypeError(f"target must hold int64 class indices, got {target.dtype}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden (..., H) and weight (V, H) disagree: {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    if tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"target must have shape {tuple(hidden.shape[:-1])}, got "
                         f"{tuple(target.shape)}")
    hidden = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    weight, target = weight.contiguous(), target.reshape(-1).contiguous()
    chunk = chunk_rows or default_chunk_rows(weight.shape[0], weight.element_size())
    with_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return _linear_cross_entropy(hidden, weight, target, int(ignore_index), REDUCTIONS[reduction],
                                 float(label_smoothing), int(chunk), with_grad)[0]


# --- measuring a head (chapter 7 and bench/llm_cross_entropy_targets.py) ----------------------

def head_inputs(tokens: int, hidden: int, vocab: int, dtype=torch.bfloat16, seed: int = 0):
    """hidden (tokens, H) and weight (V, H), both requiring grad, and int64 targets, on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = torch.randn(tokens, hidden, generator=g, device="cuda").to(dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g, device="cuda") / hidden**0.5).to(dtype)
    t = torch.randint(0, vocab, (tokens,), generator=g, device="cuda")
    return h, w.requires_grad_(), t


def measure_step(loss_fn, h, w, t, reps: int = 8):
    """(median ms of forward + backward, GiB of peak memory beyond inputs, weight and grads).

    The memory is ``torch.cuda.max_memory_allocated`` over one step minus what was allocated
    before it and minus the two gradients, after a first step (builds, autotuning, cuBLAS
    workspaces) and with the gradients of that step freed.
    """
    from ..measure.bench import time_ms

    def step(h, w, t):
        h.grad = w.grad = None
        loss_fn(h, w, t).backward()

    step(h, w, t)
    h.grad = w.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step(h, w, t)
    torch.cuda.synchronize()
    grads = h.numel() * h.element_size() + w.numel() * w.element_size()
    extra = (torch.cuda.max_memory_allocated() - before - grads) / 2**30
    return time_ms(step, [(h, w, t)], warmup=2, reps=reps), extra


def other_fused_heads() -> dict:
    """The fused linear cross-entropies of other projects installed here, by name, each called
    as ``fn(hidden, weight, target)`` for a mean loss: Liger-Kernel's (``pip install
    liger-kernel``), Apple's Cut Cross-Entropy (``pip install cut-cross-entropy``; its default
    filter skips gradient entries too small to matter in bf16) and PyTorch's own
    ``F.linear_cross_entropy`` (2.13 and later) on its chunked path."""
    heads = {}
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy
    except ImportError:
        pass
    else:
        heads["Liger-Kernel"] = lambda h, w, t: loss_only(liger_fused_linear_cross_entropy(h, w, t))
    try:
        from cut_cross_entropy import linear_cross_entropy as cut_cross_entropy
    except ImportError:
        pass
    else:
        heads["Cut Cross-Entropy"] = lambda h, w, t: cut_cross_entropy(h, w, t)
    if hasattr(torch.nn.functional, "linear_cross_entropy"):
        options = torch.nn.LinearCrossEntropyOptions()  # None would take the unchunked path
        heads["F.linear_cross_entropy"] = lambda h, w, t: torch.nn.functional.linear_cross_entropy(
            h, w, t, options=options)
    return heads


def loss_only(out):
    """Liger-Kernel's functions return (loss, ...) when asked for extra outputs: the loss."""
    return out[0] if isinstance(out, tuple) else out


def measure_step_if_it_fits(loss_fn, h, w, t, reps: int = 8):
    """:func:`measure_step`, or None where a step runs out of GPU memory (eager PyTorch's logits
    on a 16 GB GPU): on such a GPU, that a head does not fit is the measurement."""
    try:
        return measure_step(loss_fn, h, w, t, reps)
    except torch.OutOfMemoryError:
        pass  # out of the handler, so that its traceback no longer holds the step's tensors
    h.grad = w.grad = None
    torch.cuda.empty_cache()
    return None
