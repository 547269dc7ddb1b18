"""Run every op of one kernel file on small, irregular inputs (for compute-sanitizer).

    python3 tests/gpu/sanitize_driver.py kernels/ch4_two_pass/v2_deterministic_tiles.cu

tests/gpu/test_sanitizer.py runs this under ``compute-sanitizer --tool memcheck|racecheck|
synccheck|initcheck``. Inputs are made on the CPU and copied, so the only kernels that run are
the file's own; PYTORCH_NO_CUDA_MEMORY_CACHING=1 (set by the test) makes every tensor its own
cudaMalloc, so an access past the end of a tensor is outside an allocation, and memory never
written before is seen as such by initcheck. Exits non-zero if an op raises.
"""

import sys

import torch

import gpu_support  # noqa: F401  (puts the repository on sys.path)
from gpu_support import loss_of
from kernels import get_loss, load
from kernels.ops import vocab_parallel

SIZES = (1, 100, 4099, 65537)
ROW_TARGET_SHAPES = ((1, 1), (4, 25), (17, 241), (257, 255), (64, 1024))  # last: 16-byte rows
CE_SHAPES = ((1, 1), (3, 100), (17, 1001), (2, 4099), (1, 65537), (64, 1024))
# Chapter 7's clusters: 2 or 3 blocks per row (16392), 8 or 16 (131072), and clusters of one
# block (8192), more of them than fit on the GPU at once.
CLUSTER_SHAPES = ((3, 16392), (2, 131072), (1100, 8192))


def cuda(x, offset=0):
    """A copy of x on the GPU; with offset > 0, a view that starts offset elements in."""
    if offset == 0:
        return x.cuda()
    base = torch.empty(x.numel() + offset, dtype=x.dtype)
    base[offset:] = x.reshape(-1)
    return base.cuda()[offset:].view(x.shape)


def fused_loss(kernel, op, loss):
    """A chapter 6 op: every reduction, with and without the gradient (and the guess of
    grad_output for a reduced one), fp32 and bf16; the scale op with and without the guess."""
    scale = next(kernel.ops[o] for o in kernel.ops if o.endswith("_scale_grad"))
    guess = cuda(torch.tensor(3.0))
    runs = 0
    for dtype in (torch.float32, torch.bfloat16):
        def call(pred, target):
            nonlocal runs
            for reduction in (0, 1, 2):
                for want_grad in (False, True):
                    _, grad = kernel.ops[op](pred.to(dtype), target.to(dtype), reduction, 0.5,
                                             want_grad)
                    runs += 1
                    if want_grad and reduction:
                        kernel.ops[op](pred.to(dtype), target.to(dtype), reduction, 0.5, True,
                                       guess)
                        runs += 1
            scale(grad, cuda(torch.tensor(2.0).to(dtype)))
            scale(grad, cuda(torch.tensor(2.0).to(dtype)), guess)
        element_wise(call, loss)
    return runs


def element_wise(fn, loss):
    runs = 0
    g = torch.Generator().manual_seed(0)
    registered = get_loss(loss)  # its inputs and its target rule (a row, for Hinge)
    shapes = ROW_TARGET_SHAPES if registered.broadcast_target else [(n,) for n in SIZES]
    for shape in shapes:
        pred, target = registered.make_inputs(shape, g, "cpu")
        for p_off, t_off in ((0, 0), (1, 1), (1, 0)):  # aligned, both unaligned, one unaligned
            fn(cuda(pred, p_off), cuda(target, t_off))
            runs += 1
    return runs


def cross_entropy(kernel):
    ops = kernel.ops
    full = {"cross_entropy_backward", "cross_entropy_scale_grad"} <= set(ops)
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64) if full else (torch.float32,)
    runs = 0
    g = torch.Generator().manual_seed(0)
    cluster_kernel = "cross_entropy_into_logits" in ops
    for rows, classes in CE_SHAPES + (CLUSTER_SHAPES if cluster_kernel else ()):
        for dtype in dtypes:
            logits = cuda(torch.randn(rows, classes, generator=g).to(dtype))
            target_cpu = torch.randint(0, classes, (rows,), generator=g)
            target_cpu[::3] = -100
            target = cuda(target_cpu)
            for reduction in (0, 1, 2):  # none, mean, sum
                ops["cross_entropy"](logits, target, -100, reduction, 0.1 if full else 0.0, 0)
                runs += 1
            if full:
                _, grad, _ = ops["cross_entropy"](logits, target, -100, 1, 0.0, 2)
                ops["cross_entropy_scale_grad"](grad, cuda(torch.tensor(2.0).to(dtype)))
                guess = cuda(torch.tensor(3.0))  # the loss-scaling guess, forward and scale
                _, grad, _ = ops["cross_entropy"](logits, target, -100, 2, 0.0, 2, guess)
                ops["cross_entropy_scale_grad"](grad, cuda(torch.tensor(2.0).to(dtype)), guess)
                runs += 2
                _, lse, _ = ops["cross_entropy"](logits, target, -100, 0, 0.0, 1)
                grad_output = cuda(torch.rand(rows, generator=g).to(dtype))
                ops["cross_entropy_backward"](grad_output, logits, target, lse, -100, 0.0)
                runs += 3
            if cluster_kernel and dtype != torch.float64:
                ops["cross_entropy_into_logits"](logits.clone(), target, -100, 1, 0.1)
                factor = cuda(torch.tensor(0.25))  # the fused head's 1 / count
                ops["cross_entropy_into_logits"](logits.clone(), target, -100, 2, 0.0, factor)
                runs += 2
        if not full:  # the final version stops on a bad target (test_operators.py checks it)
            bad = target_cpu.clone()
            bad[0] = classes  # out of range: must not be read, only flagged
            ops["cross_entropy"](cuda(torch.randn(rows, classes, generator=g)), cuda(bad), -100, 1,
                                 0.0, 0)
            runs += 1
    return runs


def vocab_shard(kernel):
    """Chapter 8's two per-shard steps: both shards of an odd vocabulary split over two ranks,
    aligned and unaligned logits, every dtype, ignored rows, with and without the logits' sum
    and label smoothing."""
    stats, grad = kernel.ops["shard_stats"], kernel.ops["shard_grad"]
    runs = 0
    g = torch.Generator().manual_seed(0)
    for rows, vocab in ((1, 3), (17, 1001), (5, 4099)):
        target_cpu = torch.randint(0, vocab, (rows,), generator=g)
        target_cpu[::3] = -100
        target = cuda(target_cpu)
        lse, scale = cuda(torch.randn(rows, generator=g)), cuda(torch.rand(rows, generator=g))
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for rank, offset in ((0, 0), (1, 1)):
                start, stop = vocab_parallel.shard_bounds(vocab, rank, 2)
                logits = cuda(torch.randn(rows, stop - start, generator=g).to(dtype), offset)
                for want_sum in (False, True):
                    stats(logits, target, start, vocab, -100, want_sum)
                for smoothing in (0.0, 0.1):
                    grad(logits, target, lse, scale, start, vocab, -100, smoothing)
                runs += 4
    return runs


def main(path):
    kernel = load(path)
    runs = 0
    for op in sorted(kernel.ops):
        if op == "cross_entropy":
            runs += cross_entropy(kernel)
        elif op == "shard_stats":
            runs += vocab_shard(kernel)
        elif op == "shard_grad":
            continue  # exercised with shard_stats
        elif op.startswith("cross_entropy_") or op.endswith("_scale_grad"):
            continue  # exercised with their forward op
        elif kernel.struct == "FusedLossArgs":
            runs += fused_loss(kernel, op, loss_of(op))
        elif loss_of(op):
            runs += element_wise(kernel.ops[op], loss_of(op))
        else:
            raise SystemExit(f"sanitize_driver: do not know how to run op {op!r}")
    torch.cuda.synchronize()
    print(f"sanitize_driver: {path}: {runs} runs of {sorted(kernel.ops)} done")


if __name__ == "__main__":
    main(sys.argv[1])
