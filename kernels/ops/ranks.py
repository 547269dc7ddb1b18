"""What each process runs in chapter 8, started by ``torchrun`` (one process per GPU).

A notebook is one process; a collective needs one per rank. :func:`launch` starts
``python -m torch.distributed.run --standalone --nproc-per-node N -m kernels.ops.ranks TASK`` with
NVLink multicast kept off in every process, waits, and returns what rank 0 wrote (JSON), with
the lines rank 0 printed (``printed``). The tasks:

- ``check``: losses and gradients of :func:`kernels.ops.vocab_parallel.cross_entropy`, the
  vocabulary or the rows split over the ranks, against PyTorch's cross-entropy in float64 on the whole
  problem; and whether every rank got the same bits.
- ``global_mean``: ranks with different amounts of padding (ignored rows): the global mean from
  one all-reduce of (sum, count), the mean of the ranks' means, and the exact answer.
- ``time``: forward + backward of a language-model-sized cross-entropy, the vocabulary split over
  the ranks: the slowest rank's time, the time of the all-reduces alone, where rank 0's GPU time
  goes (torch.profiler), and on one GPU the course's chapter 5 kernel and PyTorch on the whole
  vocabulary.
- ``scaling``: the vocab-parallel cross-entropy and the exact mean timed on this many GPUs, with
  the bytes each rank sends on the link per row (:mod:`kernels.ops.rank_scaling`).

On CPU (``backend="gloo"``) the same code runs with the float64 reference in place of the
kernels: that is how the tests check the communication without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .rank_scaling import task_scaling
from .vocab_parallel import (MULTICAST_OFF, cross_entropy, keep_multicast_off, mean_of_means,
                             shard_bounds, use_row_log_sum_exp_from)

ROOT = Path(__file__).resolve().parents[2]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64}
# Largest error allowed against float64, relative to the largest reference value: the kernels
# round their results to the logits' dtype (bf16 keeps 8 bits, fp16 11) and use ex2.approx.
TOLERANCE = {torch.float64: 1e-12, torch.float32: 2e-5, torch.float16: 2e-3,
             torch.bfloat16: 1.6e-2}
# The cases of the check task: irregular sizes, uneven shards, ignored rows, label smoothing.
CHECK_CASES = (
    dict(split="vocab", rows=257, vocab=5003, dtype="float32", reduction="mean", ignored=0.2),
    dict(split="vocab", rows=130, vocab=4096, dtype="bfloat16", reduction="sum", smoothing=0.1),
    dict(split="vocab", rows=64, vocab=1001, dtype="float16", reduction="none", ignored=0.3),
    dict(split="vocab", rows=300, vocab=32000, dtype="bfloat16", reduction="mean", ignored=0.5,
         smoothing=0.05),
    dict(split="batch", rows=301, vocab=2053, dtype="float32", reduction="mean", ignored=0.4),
    dict(split="batch", rows=97, vocab=999, dtype="bfloat16", reduction="sum", smoothing=0.1),
)
IGNORE_INDEX = -100


def launch(task: str, nprocs: int, *, backend: str = "nccl", timeout: int = 900,
           echo: bool = True, **options) -> dict:
    """Run ``task`` on ``nprocs`` processes with ``torchrun``; return rank 0's result.

    ``backend``: "nccl" (a process per GPU) or "gloo" (CPU processes: the reference path).
    ``options`` reach the task as a dict. Rank 0's printed lines are echoed (``echo``).
    """
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        env = keep_multicast_off(dict(os.environ))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={nprocs}", "-m", "kernels.ops.ranks", task, "--out", str(out),
                   "--backend", backend, "--options", json.dumps(options)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun {task} on {nprocs} processes failed "
                               f"(exit {done.returncode}):\n{done.stdout[-3000:]}"
                               f"\n{done.stderr[-3000:]}")
        if echo and done.stdout.strip():
            print(done.stdout.rstrip())
        return {**json.loads(out.read_text()), "printed": done.stdout}


# --- inside each process ----------------------------------------------------------------------

class Context:
    """This process's rank, world size and device, after joining the process group."""

    def __init__(self, backend: str):
        keep_multicast_off()
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        if backend == "nccl":
            local = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
            dist.init_process_group("nccl", device_id=self.device)
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo")

    def say(self, *text) -> None:
        if self.rank == 0:
            print(*text, flush=True)

    def same_on_every_rank(self, value: torch.Tensor) -> bool:
        """Whether ``value`` has the same bits on every rank (compared as float64)."""
        mine = value.detach().double().reshape(-1).to(self.device)
        everyone = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(everyone, mine)
        return all(torch.equal(other.view(torch.int64), mine.view(torch.int64))
                   for other in everyone)

    def slowest(self, value: float) -> float:
        """The largest of every rank's ``value`` (a time: the step ends with the slowest rank)."""
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)


def _problem(case: dict, seed: int = 0):
    """Full logits (float64 on the CPU, then rounded to the case's dtype) and targets."""
    g = torch.Generator().manual_seed(seed)
    dtype = DTYPES[case["dtype"]]
    logits = (3 * torch.randn(case["rows"], case["vocab"], generator=g,
                              dtype=torch.float64)).to(dtype)
    target = torch.randint(0, case["vocab"], (case["rows"],), generator=g)
    if case.get("boost"):  # a model that has learned something: the target's logit stands out
        logits[torch.arange(case["rows"]), target] += case["boost"]
    ignored = torch.rand(case["rows"], generator=g) < case.get("ignored", 0.0)
    target[ignored] = IGNORE_INDEX
    return logits, target


def _reference(logits, target, case, grad_output):
    """PyTorch's loss and gradient in float64 for the whole problem."""
    x = logits.double().requires_grad_()
    loss = F.cross_entropy(x, target, ignore_index=IGNORE_INDEX, reduction=case["reduction"],
                           label_smoothing=case.get("smoothing", 0.0))
    loss.backward(grad_output.double())
    return loss.detach(), x.grad


def _relative_error(got, want) -> float:
    return float((got.double().cpu() - want).abs().max() / max(float(want.abs().max()), 1e-30))


def check_case(ctx: Context, case: dict, on_cpu: bool) -> dict:
    case = dict(case, dtype="float64") if on_cpu else case  # gloo runs the float64 reference
    logits, target = _problem(case)
    g = torch.Generator().manual_seed(1)
    rows, vocab = logits.shape
    grad_output = (torch.rand(rows, generator=g, dtype=torch.float64) + 0.5
                   if case["reduction"] == "none" else torch.tensor(0.5, dtype=torch.float64))
    want_loss, want_grad = _reference(logits, target, case, grad_output)
    group = dist.group.WORLD
    if case["split"] == "vocab":
        start, stop = shard_bounds(vocab, ctx.rank, ctx.world)
        mine = (slice(None), slice(start, stop))
        kwargs = dict(vocab_start=start, vocab_size=vocab, vocab_group=group)
    else:
        first, last = shard_bounds(rows, ctx.rank, ctx.world)
        mine = (slice(first, last), slice(None))
        kwargs = dict(batch_group=group)
    x = logits[mine].to(ctx.device).requires_grad_()
    t = target[mine[0]].to(ctx.device)
    loss = cross_entropy(x, t, ignore_index=IGNORE_INDEX, reduction=case["reduction"],
                         label_smoothing=case.get("smoothing", 0.0), **kwargs)
    upstream = grad_output[mine[0]] if case["reduction"] == "none" else grad_output
    (grad,) = torch.autograd.grad(loss, x, upstream.to(ctx.device, logits.dtype))
    tol = TOLERANCE[logits.dtype]
    loss_error = ctx.slowest(_relative_error(loss, want_loss[mine[0]] if case["reduction"] ==
                                             "none" else want_loss))
    grad_error = ctx.slowest(_relative_error(grad, want_grad[mine]))
    same = ctx.same_on_every_rank(loss) if case["reduction"] != "none" else True
    return dict(case, ranks=ctx.world, loss_error=loss_error, grad_error=grad_error,
                tolerance=tol, same_bits=same,
                passed=loss_error <= tol and grad_error <= tol and same)


def task_check(ctx: Context, options: dict) -> dict:
    on_cpu = ctx.device.type == "cpu"
    if options.get("lse_file"):
        use_row_log_sum_exp_from(options["lse_file"])
    results = [check_case(ctx, case, on_cpu) for case in options.get("cases", CHECK_CASES)]
    multicast_off = all(os.environ.get(k) == v for k, v in MULTICAST_OFF.items())
    multicast_off = ctx.slowest(0.0 if multicast_off else 1.0) == 0.0  # on every rank
    ctx.say(f"{'split':<6} {'rows x vocab':>13} {'dtype':>9} {'reduction':>9} {'ignored':>7} "
            f"{'smooth':>6} {'loss err':>9} {'grad err':>9} {'tol':>8} same bits")
    for r in results:
        ctx.say(f"{r['split']:<6} {r['rows']:>5} x {r['vocab']:<6} {r['dtype']:>9} "
                f"{r['reduction']:>9} {r.get('ignored', 0):>7} {r.get('smoothing', 0):>6} "
                f"{r['loss_error']:9.1e} {r['grad_error']:9.1e} {r['tolerance']:8.0e} "
                f"{'yes' if r['same_bits'] else 'NO'}  {'PASS' if r['passed'] else 'FAIL'}")
    ctx.say(f"NVLink multicast off in every process: {multicast_off}")
    return {"ranks": ctx.world, "cases": results, "multicast_off": multicast_off}


def task_global_mean(ctx: Context, options: dict) -> dict:
    """Ranks with different padding and difficulty: rank r ignores the fraction padding[r] of
    its rows, and its targets' logits stand out by boost[r] (short documents are padded more,
    and are not as hard as long ones: the ranks' mean losses differ)."""
    rows, vocab = options.get("rows", 4096), options.get("vocab", 32000)
    padding = options.get("padding", [0.1, 0.7, 0.4, 0.0])
    boost = options.get("boost", [0.0, 12.0, 6.0, 3.0])
    full = []
    for r in range(ctx.world):  # every rank builds every rank's rows: the reference needs them
        logits, target = _problem(dict(rows=rows, vocab=vocab, dtype="float32",
                                       ignored=padding[r % len(padding)],
                                       boost=boost[r % len(boost)]), seed=100 + r)
        full.append((logits, target))
    logits, target = (t.to(ctx.device) for t in full[ctx.rank])
    group = dist.group.WORLD
    runs = [cross_entropy(logits, target, batch_group=group) for _ in range(3)]
    repeatable = all(torch.equal(runs[0], again) for again in runs[1:])
    wrong = mean_of_means(logits, target, batch_group=group)
    want = F.cross_entropy(torch.cat([l for l, _ in full]).double(),
                           torch.cat([t for _, t in full]))
    counted = [int((t != IGNORE_INDEX).sum()) for _, t in full]
    result = dict(ranks=ctx.world, rows_per_rank=rows, vocab=vocab, counted=counted,
                  reference=float(want), global_mean=float(runs[0]),
                  mean_of_means=float(wrong),
                  global_mean_error=abs(float(runs[0]) - float(want)) / float(want),
                  mean_of_means_error=abs(float(wrong) - float(want)) / float(want),
                  same_bits=ctx.same_on_every_rank(runs[0]), repeatable=repeatable,
                  bits=runs[0].double().cpu().numpy().tobytes().hex())
    ctx.say(f"counted rows per rank: {counted}")
    ctx.say(f"float64 reference (all rows):  {want:.9f}")
    ctx.say(f"global mean (sum, count):      {float(runs[0]):.9f}  relative error "
            f"{result['global_mean_error']:.1e}")
    ctx.say(f"mean of the ranks' means:      {float(wrong):.9f}  relative error "
            f"{result['mean_of_means_error']:.1e}")
    ctx.say(f"same bits on every rank: {result['same_bits']}; same bits in 3 runs: {repeatable}")
    return result


def _queued_ms(step, iters: int = 20, repeats: int = 5) -> float:
    from ..measure.bench import queued_ms

    return queued_ms(step, (), iters=iters, repeats=repeats)


def _gpu_time_by_kind(step, reps: int = 20) -> dict:
    """Rank 0's GPU time per step (µs) by kind of kernel, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    kinds = {"shard_stats": 0.0, "shard_grad": 0.0, "nccl": 0.0, "other": 0.0}
    # The first profile of a process starts its tracer, which takes some ranks far longer than
    # others: the others' all-reduces wait, and the wait showed as NCCL time (333 ms a step).
    with profile(activities=[ProfilerActivity.CUDA]):
        step()
        torch.cuda.synchronize()
    # Start together: a rank still busy with earlier work would show as NCCL time on the other.
    step()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    for event in prof.key_averages():
        if event.device_time_total <= 0:
            continue
        name = event.key.lower()
        kind = next((k for k in ("shard_stats", "shard_grad", "nccl") if k in name), "other")
        kinds[kind] += event.device_time_total / reps
    return kinds


def task_time(ctx: Context, options: dict) -> dict:
    from ..measure.bench import read_bandwidth
    from .cross_entropy import cross_entropy as course_cross_entropy
    from ..measure.envinfo import environment

    dtype = DTYPES[options.get("dtype", "bfloat16")]
    sizes = options.get("sizes", [[8192, 256000], [16384, 128256]])
    peak = -ctx.slowest(-read_bandwidth())  # the smallest of the GPUs' read bandwidths, GB/s
    group = dist.group.WORLD
    rows_out, profiles = [], {}
    ctx.say("bf16 logits; GB/s: the logits read and their gradient written once, over all GPUs")
    for rows, vocab in sizes:
        start, stop = shard_bounds(vocab, ctx.rank, ctx.world)
        gen = torch.Generator(device=ctx.device).manual_seed(1000 + ctx.rank)
        logits = torch.randn(rows, stop - start, device=ctx.device, dtype=dtype,
                             generator=gen).requires_grad_()
        target = torch.randint(0, vocab, (rows,), device=ctx.device,
                               generator=torch.Generator(device=ctx.device).manual_seed(7))

        def step():
            loss = cross_entropy(logits, target, vocab_start=start, vocab_size=vocab,
                                 vocab_group=group)
            return torch.autograd.grad(loss, logits)

        shape = f"{rows}x{vocab}"
        minimum = 2 * rows * vocab * logits.element_size()  # read the logits, write the gradient
        measured = {f"vocab-parallel, {ctx.world} GPU{'s' if ctx.world > 1 else ''}":
                    ctx.slowest(_queued_ms(step))}
        stats = torch.zeros(3, rows, device=ctx.device)

        def communicate():  # the forward's two all-reduces alone: 1 float per row, then 2
            dist.all_reduce(stats[0], op=dist.ReduceOp.MAX)
            dist.all_reduce(stats[1:])

        comm_ms = ctx.slowest(_queued_ms(communicate)) if ctx.world > 1 else 0.0
        kinds = _gpu_time_by_kind(step)
        profiles[shape] = kinds
        if ctx.world == 1:  # the single-GPU references, on the whole vocabulary
            measured["course v3 (chapter 5), 1 GPU"] = _queued_ms(
                lambda: torch.autograd.grad(course_cross_entropy(logits, target), logits))
            measured["PyTorch eager, 1 GPU"] = _queued_ms(
                lambda: torch.autograd.grad(F.cross_entropy(logits, target), logits))
        for provider, ms in measured.items():
            rows_out.append(dict(provider=provider, shape=shape, bytes=minimum, ms=ms,
                                 gbps=minimum / (ms * 1e-3) / 1e9, comm_ms=comm_ms,
                                 comm_bytes=3 * 4 * rows))
            ctx.say(f"{shape:>13}  {provider:<30} {ms:7.3f} ms "
                    f"{minimum / (ms * 1e-3) / 1e9:6.0f} GB/s")
        if ctx.world > 1:
            ctx.say(f"{shape:>13}  the two all-reduces alone: {comm_ms * 1e3:5.1f} µs, "
                    f"{3 * 4 * rows / 1024:.0f} KiB per rank")
        ctx.say(f"{shape:>13}  rank 0, GPU µs per step: " +
                ", ".join(f"{k} {v:.0f}" for k, v in kinds.items()))
        del logits
        torch.cuda.empty_cache()
    env = environment()
    env["gpus"] = ctx.world
    return dict(ranks=ctx.world, peak_gbps=peak, rows=rows_out, profiles=profiles,
                environment=env)


SCALING_TARGET = 1.8  # 2 GPUs at least 1.8x the throughput of the same kernels on one


def results_rows(*runs) -> list[dict]:
    """The ``time`` task's measurements as rows of kernels.measure.results (bandwidth over all
    GPUs)."""
    rows = []
    for run in runs:
        for r in run["rows"]:
            rows.append(dict(gpu=run["environment"]["gpu"], chapter="ch8", loss="cross_entropy_bf16",
                             provider=r["provider"], shape=r["shape"], bytes=r["bytes"],
                             ms=f"{r['ms']:.6g}", gbps=f"{r['gbps']:.6g}",
                             peak_gbps=f"{run['peak_gbps']:.6g}"))
    return rows


def scaling(one: dict, many: dict) -> list[dict]:
    """Per shape: the same kernels on 1 GPU and on N, speedup and efficiency, PASS/MISS."""
    out = []
    for mine in many["rows"]:
        base = next(r for r in one["rows"] if r["shape"] == mine["shape"]
                    and r["provider"].startswith("vocab-parallel"))
        speedup = base["ms"] / mine["ms"]
        out.append(dict(shape=mine["shape"], gpus=many["ranks"], one_gpu_ms=base["ms"],
                        ms=mine["ms"], speedup=speedup, efficiency=speedup / many["ranks"],
                        comm_ms=mine["comm_ms"],
                        verdict="PASS" if speedup >= SCALING_TARGET else "MISS"))
    return out


TASKS = {"check": task_check, "global_mean": task_global_mean, "time": task_time,
         "scaling": task_scaling}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--options", default="{}")
    args = parser.parse_args(argv)
    ctx = Context(args.backend)
    try:
        result = TASKS[args.task](ctx, json.loads(args.options))
        if ctx.rank == 0:
            Path(args.out).write_text(json.dumps(result, indent=1))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
