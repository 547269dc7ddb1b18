"""Where an LM head's step goes: GPU time per operator, and the time the GPU sat idle.

    python bench/lm_head_profile.py                 # on the GPU machine
    python bench/lm_head_profile.py --tokens 16384 --hidden 2048 --vocab 151936

For the course's fused head (``kernels.ops.llm_head.linear_cross_entropy``) and
``torch.compile``'s, at T=8192 H=4096 V=128256 bf16 by default: the time of one forward+backward
step with nothing watching (CUDA events over several steps), then the same steps under
``torch.profiler``, which attributes each kernel to the operator that launched it (``aten::mm``,
``aten::addmm_``, ``aten::mul_``, the course's custom ops, a compiled graph's Triton kernels) with
its input shapes. Per step: each operator's GPU time and launch count, their sum, and the step's
time minus that sum, which is time the GPU had nothing to run (launch gaps, waits for the host).

``--gemms`` times only the weight gradient's product (``gemm_costs``): one product over all
tokens as compile runs it, the op's chunked products added into grad_weight, and the same
without the addition, to split the op's extra time between the short K and the read-modify-write;
then the op's products again on cuBLASLt, PyTorch's other BLAS back end.

``--variants`` also times changes of the op's chunk loop (``variant_gradients``: the mean's
1 / count applied to the whole grad_weight at the end, as the op did before it folded it into the
hidden states' chunk; two streams, which the op does not use: every stream cuBLAS runs on holds a
workspace of its own, 32 MiB on Hopper, past the op's memory budget) against the op, in turns,
profiles the op and the old loop, and prints each one's error against float64 at a small size
beside the op's.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench
from kernels.ops import llm_head
from kernels.ops.llm_head import head_inputs, linear_cross_entropy
from kernels.ops.schema import REDUCTIONS


def wall_ms(step, steps: int) -> float:
    """GPU time of ``steps`` steps queued back to back, per step."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def device_ms(row) -> float:
    """An operator's own GPU time in ms (the attribute's name changed across PyTorch versions)."""
    total = getattr(row, "self_device_time_total", None)
    return (total if total is not None else row.self_cuda_time_total) / 1e3


def profile_step(name: str, step, steps: int = 4, top: int = 12) -> None:
    for _ in range(3):  # builds, autotuning, cuBLAS's workspaces
        step()
    torch.cuda.synchronize()
    wall = min(wall_ms(step, steps) for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    averages = prof.key_averages(group_by_input_shape=True)
    # The kernels themselves are rows too (device type CUDA): they give the GPU's busy time; the
    # host's operators (device type CPU) carry their kernels' time, and their input shapes.
    busy = sum(device_ms(r) for r in averages if r.device_type == DeviceType.CUDA) / steps
    rows = sorted((r for r in averages if r.device_type == DeviceType.CPU and device_ms(r) > 0),
                  key=device_ms, reverse=True)
    print(f"\n{name}: {wall:.2f} ms per step (CUDA events, no profiler); operators' GPU time "
          f"{busy:.2f} ms; GPU idle {wall - busy:.2f} ms")
    print(f"  {'ms/step':>8} {'calls/step':>10}  operator  input shapes")
    for r in rows[:top]:
        shapes = ", ".join(str(tuple(s)) for s in (r.input_shapes or []) if s)
        print(f"  {device_ms(r) / steps:8.3f} {r.count / steps:10.1f}  {r.key[:60]}  {shapes[:70]}")


def variant_gradients(hidden, weight, target, chunk: int, streams: bool = False,
                      fold: bool = False):
    """The fused head's forward (mean loss, no ignored targets, no smoothing), changed in one or
    two ways: (loss, grad_hidden, grad_weight).

    ``streams``: each chunk's two gradient products on two streams, so that one's memory traffic
    (``grad_weight``'s epilogue reads and writes 1 GiB) can overlap the other's arithmetic.
    ``fold``: 1 / count multiplied into the chunk of hidden states that ``grad_weight``'s product
    reads, instead of into the whole ``grad_weight`` at the end (profiled at 2.4 ms, a third of
    the copy speed). The scaled copy needs no memory of its own: it goes where ``grad_hidden``
    will be written, the next chunk's rows with two streams (written there only after the
    product has read it), this chunk's rows on one stream (before its product overwrites them).
    """
    ops, main, side = llm_head._ops(), torch.cuda.current_stream(), torch.cuda.Stream()
    rows, total = hidden.shape[0], torch.zeros((), dtype=torch.float32, device=hidden.device)
    scale = torch.tensor(1.0 / rows, dtype=torch.float32, device=hidden.device)
    grad_hidden, grad_weight = torch.empty_like(hidden), torch.empty_like(weight)
    scratch = hidden.new_empty((min(chunk, rows), weight.shape[0]))
    for start in range(0, rows, chunk):
        end = min(start + chunk, rows)
        h, t, logits = hidden[start:end], target[start:end], scratch[:end - start]
        torch.mm(h, weight.t(), out=logits)
        total += ops["cross_entropy_into_logits"](logits, t, -100, REDUCTIONS["sum"], 0.0).float()
        # two streams need the next chunk's rows of grad_hidden, as many as this chunk has
        apart = streams and rows - end >= end - start
        if fold:
            spare = grad_hidden[end:2 * end - start] if apart else grad_hidden[start:end]
            h = torch.mul(h, scale, out=spare)
        stream = side if apart or (streams and not fold) else main
        stream.wait_stream(main)  # the gradient is in the logits, the scaled rows are written
        with torch.cuda.stream(stream):
            if start == 0:
                torch.mm(logits.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(logits.t(), h)
        torch.mm(logits, weight, out=grad_hidden[start:end])
        grad_hidden[start:end].mul_(scale)
        main.wait_stream(stream)  # the next chunk's logits overwrite the scratch
    if not fold:
        grad_weight.mul_(scale)
    return (total * scale).to(hidden.dtype), grad_hidden, grad_weight


VARIANTS = {"scale at the end": dict(fold=False), "two streams": dict(streams=True, fold=True)}


def variants_against_float64(dtype=torch.bfloat16, tokens=3000, hidden=256, vocab=16392):
    """Each variant's largest relative error in loss, grad_hidden and grad_weight against float64
    at a small size (three chunks of 1024 rows, the last one short), beside the op's."""
    from kernels.measure.correctness import relative_error

    h, w, t = head_inputs(tokens, hidden, vocab, dtype, seed=1)
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = F.cross_entropy(h64 @ w64.t(), t)
    want.backward()
    wanted = (want.detach(), h64.grad, w64.grad)
    found = {"the op": llm_head._linear_cross_entropy(h.detach(), w.detach(), t, -100,
                                                     REDUCTIONS["mean"], 0.0, 1024, True)}
    found |= {name: variant_gradients(h.detach(), w.detach(), t, 1024, **how)
              for name, how in VARIANTS.items()}
    return {name: [relative_error(g.double(), r) for g, r in zip(got, wanted)]
            for name, got in found.items()}


def variants_experiment(h, w, t) -> None:
    chunk = llm_head.default_chunk_rows(w.shape[0], w.element_size())
    with torch.no_grad():
        steps = {"the op": lambda: llm_head._linear_cross_entropy(
            h, w, t, -100, REDUCTIONS["mean"], 0.0, chunk, True)}
        steps |= {name: (lambda how=how: variant_gradients(h, w, t, chunk, **how))
                  for name, how in VARIANTS.items()}
        for fn in steps.values():
            fn()
        # in turns, so that a clock that drifts (power, heat) over the run favours none of them
        times = {name: [] for name in steps}
        for _ in range(5):
            for name, fn in steps.items():
                times[name].append(wall_ms(fn, 4))
    print(f"\nvariants of the forward with gradients, chunks of {chunk} rows, per step "
          "(5 turns of 4 steps each: the fastest turn, then every turn):")
    for name, ms in times.items():
        print(f"  {name:<22} {min(ms):8.2f} ms   " + " ".join(f"{m:.2f}" for m in ms))
    with torch.no_grad():
        for name in ("the op", "scale at the end"):
            profile_step(name, steps[name])
    for dtype in (torch.float32, torch.bfloat16):
        print(f"relative error against float64, {str(dtype)[6:]}, 3000 x 256 x 16392 "
              "(loss, grad_hidden, grad_weight):")
        for name, errors in variants_against_float64(dtype).items():
            print(f"  {name:<22} " + "  ".join(f"{e:.1e}" for e in errors))


def with_blas(library: str, chunked) -> None:
    """The op's chunked products on another of PyTorch's BLAS back ends (cuBLASLt chooses its
    kernels by heuristics of its own)."""
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        chunked(True)
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def gemm_costs(tokens: int, hidden: int, vocab: int, turns: int = 5) -> None:
    """The weight gradient's product four ways, in turns, TFLOP/s of each (the fastest turn):
    compile's one product over all tokens (K = T); the op's, a product per chunk of tokens
    added into grad_weight (``addmm_``: beta = 1, each chunk reads and writes grad_weight); and
    the same chunked products without the addition (beta = 0, a wrong sum, for the timing only).
    Chunked against one product is the cost of a short K; beta 1 against beta 0 is the cost of
    the read-modify-write of grad_weight, which a GEMM that accumulates in its epilogue would
    hide. The fourth is the op's products on cuBLASLt (``with_blas``)."""
    chunk = llm_head.default_chunk_rows(vocab, 2)
    g = torch.Generator(device="cuda").manual_seed(0)
    dlogits = torch.randn(tokens, vocab, device="cuda", generator=g).to(torch.bfloat16)
    h = torch.randn(tokens, hidden, device="cuda", generator=g).to(torch.bfloat16)
    grad_weight = torch.empty(vocab, hidden, device="cuda", dtype=torch.bfloat16)
    starts = range(0, tokens, chunk)

    def chunked(accumulate: bool):
        for start in starts:
            d, x = dlogits[start:start + chunk], h[start:start + chunk]
            if accumulate and start > 0:
                grad_weight.addmm_(d.t(), x)
            else:
                torch.mm(d.t(), x, out=grad_weight)

    products = {"one product, K = T": lambda: torch.mm(dlogits.t(), h, out=grad_weight),
                f"chunks of {chunk}, beta 1 (the op)": lambda: chunked(True),
                f"chunks of {chunk}, beta 0": lambda: chunked(False),
                f"chunks of {chunk}, beta 1, cuBLASLt": lambda: with_blas("cublaslt", chunked)}
    for run in products.values():
        run()  # warm: cuBLAS's choice of kernel for each shape
    best = {name: float("inf") for name in products}
    for _ in range(turns):
        for name, run in products.items():
            best[name] = min(best[name], wall_ms(run, 3))
    flop = 2 * tokens * hidden * vocab
    print(f"grad_weight = dlogits^T h, T={tokens} H={hidden} V={vocab} bf16, fastest of {turns}:")
    for name, ms in best.items():
        print(f"  {name:<32} {ms:7.2f} ms  {flop / ms / 1e9:5.0f} TFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--variants", action="store_true",
                        help="time variants of the chunk loop (scale at the end, two streams)")
    parser.add_argument("--gemms", action="store_true",
                        help="only the weight gradient's product: one, chunked, with and "
                             "without the read-modify-write of grad_weight")
    args = parser.parse_args()
    require_gpus(1, "bench/lm_head_profile.py")
    if args.gemms:
        gemm_costs(args.tokens, args.hidden, args.vocab)
        return

    def eager_head(h, w, t):
        return F.cross_entropy(h @ w.t(), t)

    heads = {"fused (course)": linear_cross_entropy,
             "torch.compile": torch.compile(eager_head, dynamic=False)}
    print(f"{torch.cuda.get_device_name()}: LM head T={args.tokens} H={args.hidden} "
          f"V={args.vocab} bf16, forward+backward")
    for name, fn in heads.items():
        inputs = head_inputs(args.tokens, args.hidden, args.vocab)
        profile_step(name, functools.partial(bench.training_step(fn), *inputs))
        del inputs
        torch.cuda.empty_cache()
    if args.variants:
        h, w, t = head_inputs(args.tokens, args.hidden, args.vocab)
        variants_experiment(h.detach(), w.detach(), t)


if __name__ == "__main__":
    main()
