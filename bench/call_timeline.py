"""Where a call's GPU time goes between its kernels: a probe, not a benchmark.

    python bench/call_timeline.py        # on the GPU machine, about a minute

``bench.time_ms`` gives a call's time between two events; ``bench.kernel_times`` gives each
kernel's time. Neither says where the rest goes: the wait before the call's first kernel, the
gaps between kernels, or a dependent launch's wait. This runs each call as ``time_ms`` does
(L2 cleared by a read, a sleep kernel queued after it), under the profiler, and prints each
kernel's start and end in µs from the end of the sleep kernel, median over the repetitions,
then the call's events time, for the calls that still miss their targets (issue 29):

- cross-entropy forward, bf16 32768 x 16384, version 4, beside torch.sum over the same logits
  (3000 GB/s is the target; the row kernel alone reads faster than torch.sum);
- MSE at 2^12 elements, version 5 against torch.compile (about 5% slower in every run).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPS = 20
SLEEP_KERNEL = "spin"  # torch.cuda._sleep's kernel
GAP_US = 500  # kernels further apart belong to different repetitions (1 ms sleep)


def repetitions(kernels: list) -> list[list]:
    """The profiler's kernels (name, start, end), split where the host synchronised."""
    groups, current = [], []
    for kernel in sorted(kernels, key=lambda k: k[1]):
        if current and kernel[1] - current[-1][2] > GAP_US:
            groups.append(current)
            current = []
        current.append(kernel)
    return groups + [current] if current else groups


def timeline(label: str, fn, args) -> None:
    """Print each kernel of ``fn(*args)`` after the clear and the sleep, as ``time_ms`` runs it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernels import bench

    print(f"{label}: events {1e3 * bench.time_ms(fn, [args]):.1f} us (bench.time_ms)")
    buffer = torch.ones(256 << 18, device="cuda")
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            buffer.sum()
            torch.cuda._sleep(bench.LEAD_CYCLES)
            fn(*args)
            torch.cuda.synchronize()
            time.sleep(1e-3)
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    calls = []
    for group in repetitions(kernels):
        sleep = [i for i, k in enumerate(group) if SLEEP_KERNEL in k[0]]
        if sleep:
            origin = group[sleep[-1]][2]
            calls.append([(name, start - origin, end - origin)
                          for name, start, end in group[sleep[-1] + 1:]])
    shapes = {len(call) for call in calls}
    if len(shapes) != 1:
        print(f"  kernels per call differ between repetitions: {sorted(shapes)}")
    count = min(shapes)
    for i in range(count):
        name = calls[0][i][0].removeprefix("void ").split("(")[0].strip()[:48]
        start = statistics.median(call[i][1] for call in calls)
        end = statistics.median(call[i][2] for call in calls)
        print(f"  {name:<48} {start:8.1f} -> {end:8.1f} us")


def main() -> int:
    import torch

    from kernels import bench, get_loss, load
    from kernels.ops.cross_entropy import cross_entropy
    from kernels.ops.llm_head import LLM_CE_FILE

    print(torch.cuda.get_device_name())
    v4 = load(LLM_CE_FILE)
    logits = torch.randn(32768, 16384, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, 16384, (32768,), device="cuda")
    with torch.no_grad():
        timeline("v4 forward bf16 32768 x 16384", lambda x, t: cross_entropy(x, t, kernel=v4),
                 (logits, target))
        timeline("torch.sum, the same logits", torch.sum, (logits,))
    del logits, target

    v5 = load("ch4_two_pass/v5_block_tiles.cu")
    mse = get_loss("mse")
    generator = torch.Generator(device="cuda").manual_seed(0)
    args = mse.make_inputs(bench.element_wise_shape(1 << 12, "mse"), generator, "cuda")
    timeline("v5 mse 2^12", v5.mse, args)
    timeline("torch.compile mse 2^12", torch.compile(mse.reference, dynamic=False), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
