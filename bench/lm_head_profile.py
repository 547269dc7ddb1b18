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

``--overlap`` also times an experiment: the fused head with each chunk's two gradient products
(``grad_hidden``'s, a small output with a long sum, and ``grad_weight``'s, a large output whose
epilogue reads and writes 1 GiB) on two streams, so that one's memory traffic can overlap the
other's arithmetic; it prints both steps' times and how far the results differ.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from kernels.ops import llm_head
from kernels.ops.llm_head import head_inputs, linear_cross_entropy
from kernels.ops.schema import REDUCTIONS


def step_of(loss_fn, h, w, t):
    def step():
        h.grad = w.grad = None
        loss_fn(h, w, t).backward()
    return step


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


def profile_head(name: str, loss_fn, h, w, t, steps: int = 4, top: int = 12) -> None:
    step = step_of(loss_fn, h, w, t)
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


def overlapped_gradients(hidden, weight, target, chunk: int):
    """The fused head's forward (mean loss, no ignored targets, no smoothing) with each chunk's
    two gradient products on two streams: (loss, grad_hidden, grad_weight)."""
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
        side.wait_stream(main)  # the gradient is in the logits
        with torch.cuda.stream(side):
            if start == 0:
                torch.mm(logits.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(logits.t(), h)
        torch.mm(logits, weight, out=grad_hidden[start:end])
        grad_hidden[start:end].mul_(scale)
        main.wait_stream(side)  # the next chunk's logits overwrite the scratch
    grad_weight.mul_(scale)
    return (total * scale).to(hidden.dtype), grad_hidden, grad_weight


def overlap_experiment(h, w, t) -> None:
    chunk = llm_head.default_chunk_rows(w.shape[0], w.element_size())
    with torch.no_grad():
        reference = llm_head._linear_cross_entropy(h, w, t, -100, REDUCTIONS["mean"], 0.0, chunk,
                                                   True)
        overlapped = overlapped_gradients(h, w, t, chunk)
        differences = [(a.float() - b.float()).abs().max().item()
                       for a, b in zip(reference, overlapped)]
        times = {}
        for name, fn in (("one stream (the op)", lambda: llm_head._linear_cross_entropy(
                              h, w, t, -100, REDUCTIONS["mean"], 0.0, chunk, True)),
                         ("two streams", lambda: overlapped_gradients(h, w, t, chunk))):
            fn()
            times[name] = min(wall_ms(fn, 4) for _ in range(3))
    print(f"\noverlap experiment, chunks of {chunk} rows, forward with gradients, per step:")
    for name, ms in times.items():
        print(f"  {name:<22} {ms:8.2f} ms")
    print("  largest difference (loss, grad_hidden, grad_weight): "
          + ", ".join(f"{d:.1e}" for d in differences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--overlap", action="store_true", help="time the two-stream experiment")
    args = parser.parse_args()

    def eager_head(h, w, t):
        return F.cross_entropy(h @ w.t(), t)

    heads = {"fused (course)": linear_cross_entropy,
             "torch.compile": torch.compile(eager_head, dynamic=False)}
    print(f"{torch.cuda.get_device_name()}: LM head T={args.tokens} H={args.hidden} "
          f"V={args.vocab} bf16, forward+backward")
    for name, fn in heads.items():
        profile_head(name, fn, *head_inputs(args.tokens, args.hidden, args.vocab))
        torch.cuda.empty_cache()
    if args.overlap:
        h, w, t = head_inputs(args.tokens, args.hidden, args.vocab)
        overlap_experiment(h.detach(), w.detach(), t)


if __name__ == "__main__":
    main()
