"""Chapter 8: cross-entropy when the rows or the vocabulary are split across GPUs.

``cross_entropy(logits, target, ...)`` computes ``F.cross_entropy`` (class-index targets,
``ignore_index``, ``label_smoothing``, reduction "mean", "sum" or "none") for logits that one
process holds only part of, with autograd. Two ways to split, which combine:

- ``batch_group``: the rows are split (data parallelism). Each rank sums its rows' losses and
  counts its rows that are not ignored; one all-reduce of that (sum, count) pair, in float64,
  gives the exact global mean, the same bits on every rank. (A mean of the ranks' means is
  wrong whenever the ranks count different numbers of rows.)
- ``vocab_group``: the columns are split (tensor parallelism, Megatron-LM's vocab-parallel
  cross-entropy). This rank holds the classes ``[vocab_start, vocab_start + cols)`` of a
  vocabulary of ``vocab_size``. The kernel ``shard_stats`` reads the shard once and returns per
  row its max, its sum of exponentials and the target's logit if this rank owns it; the ranks
  all-reduce the max, then the rescaled sums (a few floats per row, never a logit), and each
  writes the gradient of its own shard (``shard_grad``, one more read and one write).

On CUDA (float32, bfloat16, float16) the kernels are ``kernels/ch8_multi_gpu/vocab_shard.cu``;
anywhere else (CPU tensors, float64) the same statistics come from PyTorch in float64, which is
what the CPU tests run over the ``gloo`` backend, and what the GPU tests compare the kernels with.

The machines this course lends keep NVLink multicast off: :data:`MULTICAST_OFF` holds the
variables, and :func:`keep_multicast_off` sets them (``kernels.ops.ranks`` does so in every
process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .cross_entropy import validate_targets
from .schema import REDUCTIONS

KERNEL_FILE = "ch8_multi_gpu/vocab_shard.cu"
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# NVLink multicast (NVLS) off in every rank: chapter 8's numbers are those of the ring and tree
# algorithms that every NVLink machine has, and on shared hosts NVLS has taken GPUs out of
# service. Empty it on a machine of your own to let NCCL choose NVLS.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
STAT_MAX, STAT_SUM_EXP, STAT_TARGET_LOGIT, STAT_SUM_LOGITS = range(4)  # vocab_shard_args.h

_KERNEL = None


def keep_multicast_off(env=None) -> dict:
    """Set :data:`MULTICAST_OFF` in ``env`` (default: this process's environment); return it."""
    env = os.environ if env is None else env
    env.update(MULTICAST_OFF)
    return env


def shard_bounds(vocab_size: int, rank: int, world: int) -> tuple[int, int]:
    """The classes ``[start, stop)`` of ``rank``: equal shards, the first ranks one class more."""
    if not 0 <= rank < world or vocab_size < world:
        raise ValueError(f"cannot give rank {rank} of {world} a share of {vocab_size} classes")
    base, extra = divmod(vocab_size, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def _ops():
    global _KERNEL
    if _KERNEL is None:
        from ..build.loader import load

        _KERNEL = load(KERNEL_FILE)
    return _KERNEL.ops


def _on_kernel(logits) -> bool:
    return logits.is_cuda and logits.dtype in KERNEL_DTYPES


# --- the two per-shard steps: a CUDA kernel, or PyTorch in float64 -----------------------------

def shard_stats(logits, target, vocab_start: int, vocab_size: int, ignore_index: int = -100,
                want_sum: bool = False):
    """(rows, 4): the shard's max, sum of exp(x - max), owned target logit (else 0), sum of x.

    float32 from the kernel; float64 from the reference (CPU or float64 logits). The sum of the
    logits is only computed with ``want_sum`` (label smoothing); else that column is 0.
    """
    if _on_kernel(logits):
        return _ops()["shard_stats"](logits, target, vocab_start, vocab_size, ignore_index,
                                     want_sum)
    return reference_stats(logits, target, vocab_start, vocab_size, ignore_index, want_sum)


def shard_grad(logits, target, lse, row_scale, vocab_start: int, vocab_size: int,
               ignore_index: int = -100, label_smoothing: float = 0.0):
    """row_scale * (softmax - (1 - eps) one_hot - eps / vocab_size) of this shard's columns."""
    if _on_kernel(logits):
        return _ops()["shard_grad"](logits, target, lse.float(), row_scale.float(), vocab_start,
                                    vocab_size, ignore_index, label_smoothing)
    return reference_grad(logits, target, lse, row_scale, vocab_start, vocab_size, ignore_index,
                          label_smoothing)


def _owned(target, vocab_start: int, cols: int, ignore_index: int):
    """Which rows' targets lie in this shard, and their column in it (0 where not owned)."""
    local = target - vocab_start
    owned = (target != ignore_index) & (local >= 0) & (local < cols)
    return owned, torch.where(owned, local, torch.zeros_like(local))


def reference_stats(logits, target, vocab_start, vocab_size, ignore_index=-100, want_sum=False):
    """:func:`shard_stats` computed by PyTorch in float64 (raises IndexError on a bad target)."""
    validate_targets(target, vocab_size, ignore_index)
    x = logits.double()
    top = x.max(dim=1).values
    sum_exp = torch.exp(x - top[:, None]).sum(dim=1)
    owned, column = _owned(target, vocab_start, x.shape[1], ignore_index)
    target_logit = torch.where(owned, x.gather(1, column[:, None]).squeeze(1), 0.0)
    sum_logits = x.sum(dim=1) if want_sum else torch.zeros_like(top)
    return torch.stack([top, sum_exp, target_logit, sum_logits], dim=1)


def reference_grad(logits, target, lse, row_scale, vocab_start, vocab_size, ignore_index=-100,
                   label_smoothing=0.0):
    """:func:`shard_grad` computed by PyTorch in float64, returned in the logits' dtype."""
    x = logits.double()
    d = torch.exp(x - lse.double()[:, None]) - label_smoothing / vocab_size
    owned, column = _owned(target, vocab_start, x.shape[1], ignore_index)
    hit = torch.zeros_like(d).scatter_(1, column[:, None], (1.0 - label_smoothing) *
                                       owned.double()[:, None])
    scale = row_scale.double()[:, None]
    grad = torch.where(scale == 0, 0.0, scale * (d - hit))
    return grad.to(logits.dtype)


# --- the communication: a few floats per row, or two per rank ---------------------------------

def _size(group) -> int:
    return dist.get_world_size(group) if group is not None else 1


def row_log_sum_exp(stats, vocab_group=None, label_smoothing: float = 0.0):
    """Each row's (lse, target logit, sum of logits) over the whole vocabulary.

    Two all-reduces over ``vocab_group``: the max (one float per row), then the sums of
    exponentials, each rescaled to the global max, with the target logits (and the sums of the
    logits with label smoothing): two or three floats per row. The same values on every rank.
    """
    local_max = stats[:, STAT_MAX]
    global_max = local_max.clone()
    if _size(vocab_group) > 1:
        dist.all_reduce(global_max, op=dist.ReduceOp.MAX, group=vocab_group)
    # A shard whose logits are all -inf holds nothing (and must not give -inf - -inf = NaN).
    rescale = torch.where(local_max == -torch.inf, 0.0, torch.exp(local_max - global_max))
    columns = [stats[:, STAT_SUM_EXP] * rescale, stats[:, STAT_TARGET_LOGIT]]
    if label_smoothing:
        columns.append(stats[:, STAT_SUM_LOGITS])
    sums = torch.stack(columns)
    if _size(vocab_group) > 1:
        dist.all_reduce(sums, group=vocab_group)
    lse = global_max + torch.log(sums[0])
    return lse, sums[1], (sums[2] if label_smoothing else None)


def use_row_log_sum_exp_from(path: str):
    """Swap in another :func:`row_log_sum_exp` (exercise 8.1), defined in the Python file at
    ``path``, for the rest of this process; return the one it replaces."""
    import importlib.util

    global row_log_sum_exp
    spec = importlib.util.spec_from_file_location("exercise_row_log_sum_exp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    replaced, row_log_sum_exp = row_log_sum_exp, module.row_log_sum_exp
    return replaced


def global_sum_and_count(row_losses, counted, batch_group=None):
    """(sum of the losses, number of counted rows) over every rank of ``batch_group``.

    float64 on every rank: one all-reduce of two numbers. NCCL leaves the same result on every
    rank, so every rank gets the same bits; the order of its additions is not documented, so
    the same bits from one run to the next are not promised.
    """
    pair = torch.stack([row_losses.double().sum(), counted.double().sum()])
    if _size(batch_group) > 1:
        dist.all_reduce(pair, group=batch_group)
    return pair[0], pair[1]


@dataclass(frozen=True)
class _Spec:
    vocab_start: int
    vocab_size: int
    vocab_group: object
    batch_group: object
    ignore_index: int
    reduction: str
    label_smoothing: float


class _ShardedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, spec: _Spec):
        eps = spec.label_smoothing
        stats = shard_stats(logits, target, spec.vocab_start, spec.vocab_size, spec.ignore_index,
                            want_sum=eps > 0)
        lse, target_logit, sum_logits = row_log_sum_exp(stats, spec.vocab_group, eps)
        loss = lse - (1.0 - eps) * target_logit
        if eps:
            loss = loss - eps / spec.vocab_size * sum_logits
        counted = target != spec.ignore_index
        loss = torch.where(counted, loss, 0.0)
        count = None
        if spec.reduction != "none":
            total, count = global_sum_and_count(loss, counted, spec.batch_group)
            loss = total / count if spec.reduction == "mean" else total
        ctx.spec = spec
        ctx.save_for_backward(logits, target, lse, count)
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_loss):
        logits, target, lse, count = ctx.saved_tensors
        spec = ctx.spec
        counted = target != spec.ignore_index
        scale = grad_loss.double()
        if spec.reduction == "mean":
            scale = scale / count
        scale = torch.where(counted, scale.expand(counted.shape), 0.0)
        grad = shard_grad(logits, target, lse, scale.to(lse.dtype), spec.vocab_start,
                          spec.vocab_size, spec.ignore_index, spec.label_smoothing)
        return grad, None, None


def cross_entropy(logits, target, *, vocab_start: int = 0, vocab_size: int | None = None,
                  vocab_group=None, batch_group=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """``F.cross_entropy`` of logits split over ranks (see the module); differentiable.

    ``logits`` (rows, cols): this rank's rows and its shard of the classes, the columns
    ``[vocab_start, vocab_start + cols)`` of ``vocab_size`` (default: cols, no split).
    ``target`` (rows,): global class indices. ``vocab_group``: the ranks that hold the other
    shards of the same rows; ``batch_group``: the ranks that hold other rows (the mean and the
    sum are taken over all of them). The loss is the same on every rank of both groups; the
    gradient is this rank's part, d loss / d logits, with no communication.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be (rows, classes of this shard), got {tuple(logits.shape)}")
    if not torch.is_tensor(target) or target.dtype != torch.int64 or target.dim() != 1 \
            or target.shape[0] != logits.shape[0]:
        raise ValueError(f"target must be an int64 tensor of shape ({logits.shape[0]},)")
    vocab_size = logits.shape[1] if vocab_size is None else vocab_size
    if not 0 <= vocab_start <= vocab_size - logits.shape[1]:
        raise ValueError(f"the shard [{vocab_start}, {vocab_start + logits.shape[1]}) does not "
                         f"fit in a vocabulary of {vocab_size} classes")
    spec = _Spec(vocab_start, vocab_size, vocab_group, batch_group, ignore_index, reduction,
                 float(label_smoothing))
    return _ShardedCrossEntropy.apply(logits, target, spec)


def mean_of_means(logits, target, batch_group=None, ignore_index: int = -100):
    """The mistake: every rank's own mean, averaged over the ranks (for comparison only)."""
    mine = torch.nn.functional.cross_entropy(logits.float(), target, ignore_index=ignore_index)
    if _size(batch_group) > 1:
        dist.all_reduce(mine, group=batch_group)
    return mine / _size(batch_group)
