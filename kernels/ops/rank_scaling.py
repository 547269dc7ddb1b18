"""Chapter 8's scaling task: the same two losses on 1, 2, 4... GPUs, one ``torchrun`` per count.

``bench/vocab_parallel_scaling.py`` launches the task ``scaling`` (registered in
:data:`kernels.ops.ranks.TASKS`) once per GPU count and keeps the rows in
``book/results/ch8_scaling.csv``. Per GPU count it measures:

- the vocab-parallel cross-entropy (bf16, forward + backward; the vocabulary split over the
  ranks, the rows the same on every rank): the slowest rank's step, the forward's two
  all-reduces alone, and one all-gather of the four statistics alone (exercise 8.1's single
  collective); with ``lse_file``, also the step with that file's ``row_log_sum_exp``;
- the exact global mean (float32 logits, every rank its own rows: weak scaling): the slowest
  rank's forward + backward and the all-reduce of (sum, count) alone.

Bytes on the link are what each rank sends for a row (or a rank's pair) by the ring
algorithms' counts: an all-reduce of ``k`` bytes sends ``2 (R - 1) / R * k``; an all-gather of
``k`` bytes from each rank sends ``(R - 1) * k``. NCCL may pick a tree for small messages,
which sends about as much.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import vocab_parallel
from .vocab_parallel import cross_entropy, shard_bounds

STAT_BYTES = 4 * 4  # a row's four float32 statistics, what exercise 8.1 gathers
REDUCED_BYTES = 3 * 4  # a row's max, then its rescaled sum and target logit: two all-reduces
PAIR_BYTES = 2 * 8  # the global mean's (sum, count), float64


def all_reduce_bytes(message: int, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``message`` bytes."""
    return 2 * (ranks - 1) / ranks * message


def all_gather_bytes(each: int, ranks: int) -> float:
    """Bytes each rank sends in a ring all-gather of ``each`` bytes from every rank."""
    return (ranks - 1) * each


def _vocab_parallel_rows(ctx, queued_ms, rows: int, vocab: int, lse_file: str | None) -> list:
    start, stop = shard_bounds(vocab, ctx.rank, ctx.world)
    gen = torch.Generator(device=ctx.device).manual_seed(1000 + ctx.rank)
    logits = torch.randn(rows, stop - start, device=ctx.device, dtype=torch.bfloat16,
                         generator=gen).requires_grad_()
    target = torch.randint(0, vocab, (rows,), device=ctx.device,
                           generator=torch.Generator(device=ctx.device).manual_seed(7))
    group = dist.group.WORLD

    def step():
        loss = cross_entropy(logits, target, vocab_start=start, vocab_size=vocab,
                             vocab_group=group)
        return torch.autograd.grad(loss, logits)

    reduced = torch.zeros(3, rows, device=ctx.device)
    stats = torch.zeros(rows, 4, device=ctx.device)
    gathered = [torch.empty_like(stats) for _ in range(ctx.world)]

    def two_all_reduces():  # the forward's: 1 float per row (max), then 2 (sums)
        dist.all_reduce(reduced[0], op=dist.ReduceOp.MAX)
        dist.all_reduce(reduced[1:])

    def one_all_gather():  # exercise 8.1's: every rank's 4 floats per row
        dist.all_gather(gathered, stats)

    several = ctx.world > 1
    shape = f"{rows}x{vocab}"
    out = [dict(loss="vocab-parallel CE", what="step", shape=shape,
                ms=ctx.slowest(queued_ms(step)),
                link_bytes_per_row=all_reduce_bytes(REDUCED_BYTES, ctx.world)),
           dict(loss="vocab-parallel CE", what="two all-reduces alone", shape=shape,
                ms=ctx.slowest(queued_ms(two_all_reduces)) if several else 0.0,
                link_bytes_per_row=all_reduce_bytes(REDUCED_BYTES, ctx.world)),
           dict(loss="vocab-parallel CE", what="one all-gather alone", shape=shape,
                ms=ctx.slowest(queued_ms(one_all_gather)) if several else 0.0,
                link_bytes_per_row=all_gather_bytes(STAT_BYTES, ctx.world))]
    if lse_file and several:
        two = vocab_parallel.use_row_log_sum_exp_from(lse_file)
        out.append(dict(loss="vocab-parallel CE", what="step, one all-gather (exercise 8.1)",
                        shape=shape, ms=ctx.slowest(queued_ms(step)),
                        link_bytes_per_row=all_gather_bytes(STAT_BYTES, ctx.world)))
        vocab_parallel.row_log_sum_exp = two
    del logits
    torch.cuda.empty_cache()
    return out


def _global_mean_rows(ctx, queued_ms, rows: int, vocab: int) -> list:
    gen = torch.Generator(device=ctx.device).manual_seed(100 + ctx.rank)
    logits = (3 * torch.randn(rows, vocab, device=ctx.device, generator=gen)).requires_grad_()
    target = torch.randint(0, vocab, (rows,), device=ctx.device, generator=gen)
    target[torch.rand(rows, device=ctx.device, generator=gen) < 0.1 * (1 + ctx.rank % 4)] = -100
    group = dist.group.WORLD

    def step():
        return torch.autograd.grad(cross_entropy(logits, target, batch_group=group), logits)

    pair = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    shape = f"{rows}x{vocab}"
    out = [dict(loss="exact global mean", what="step", shape=shape,
                ms=ctx.slowest(queued_ms(step)),
                link_bytes_per_row=all_reduce_bytes(PAIR_BYTES, ctx.world) / rows),
           dict(loss="exact global mean", what="one all-reduce alone", shape=shape,
                ms=ctx.slowest(queued_ms(lambda: dist.all_reduce(pair)))
                if ctx.world > 1 else 0.0,
                link_bytes_per_row=all_reduce_bytes(PAIR_BYTES, ctx.world) / rows)]
    del logits
    torch.cuda.empty_cache()
    return out


def task_scaling(ctx, options: dict) -> dict:
    from ..measure.bench import queued_ms as bench_queued_ms
    from ..measure.envinfo import environment

    def queued_ms(fn):
        return bench_queued_ms(fn, (), iters=20, repeats=5)

    rows = []
    for n, vocab in options.get("sizes", [[8192, 256000], [16384, 128256]]):
        rows += _vocab_parallel_rows(ctx, queued_ms, n, vocab, options.get("lse_file"))
    n, vocab = options.get("mean_size", [4096, 32000])
    rows += _global_mean_rows(ctx, queued_ms, n, vocab)
    env = environment()
    for r in rows:
        r.update(gpus=ctx.world, gpu=env["gpu"])
        ctx.say(f"{ctx.world} GPU{'s' if ctx.world > 1 else ' '} {r['loss']:<18} "
                f"{r['shape']:>13} {r['what']:<37} {r['ms'] * 1e3:9.1f} µs "
                f"{r['link_bytes_per_row']:7.2f} B/row on the link")
    env["gpus"] = ctx.world
    return dict(ranks=ctx.world, rows=rows, environment=env)
