"""Where a call's GPU time goes between its kernels: a probe, not a benchmark.

    python bench/call_timeline.py        # on the GPU machine, about two minutes

``bench.time_ms`` gives a call's time between two events; ``bench.kernel_times`` gives each
kernel's time. Neither says where the rest goes: the wait before the call's first kernel, the
gaps between kernels, or a dependent launch's wait. This runs each call as ``time_ms`` does
(L2 cleared by a read, a sleep kernel queued after it), under the profiler, and prints each
kernel's start and end in µs from the end of the sleep kernel, median over the repetitions,
then the call's events time, for the calls that still miss their targets (issue 29):

- cross-entropy forward, bf16 32768 x 16384, version 4, beside torch.sum over the same logits
  (3000 GB/s is the target; the row kernel alone reads faster than torch.sum);
- MSE at 2^12 elements, version 5 against torch.compile (about 5% slower in every run), and at
  2^20 (ahead in every sweep under the old write clear, behind in the first under the read);
- the LM head's step at T=8192, H=4096, V=128256, the course's fused head and torch.compile's:
  the kernels' total, the gaps between them, and the largest gaps (session 20's profile found
  the GPU idle about 1 ms of the fused head's step, which the products do not explain).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import bench  # noqa: E402
from kernels.measure.spans import SLEEP_KERNEL  # noqa: E402

REPS = 20
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


def profiled_calls(fn, args, reps: int) -> list[list]:
    """Each repetition's kernels (name, start, end), in µs from the end of its sleep kernel."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    before_call = bench.clear_and_lead()
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            before_call()
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
    return calls


def gap_summary(calls: list[list], top: int = 5) -> None:
    """For calls of many kernels: where the GPU waited between them (the first repetition's
    largest gaps, and the medians of the totals)."""
    def gaps(call):
        return [(b[1] - a[2], a[0], b[0]) for a, b in zip(call, call[1:])]

    busy = statistics.median(sum(end - start for _, start, end in call) for call in calls)
    span = statistics.median(call[-1][2] for call in calls)
    idle = statistics.median(sum(max(g, 0.0) for g, _, _ in gaps(call)) for call in calls)
    print(f"  {len(calls[0])} kernels; first starts {statistics.median(c[0][1] for c in calls):.1f}"
          f" us after the sleep, last ends at {span:.1f}; kernels {busy:.1f} us, gaps {idle:.1f}")
    for gap, before, after in sorted(gaps(calls[0]), reverse=True)[:top]:
        print(f"    {gap:7.1f} us between {bench.kernel_name(before, 48)} and "
              f"{bench.kernel_name(after, 48)}")


def timeline(label: str, fn, args, reps: int = REPS) -> None:
    """Print each kernel of ``fn(*args)`` after the clear and the sleep, as ``time_ms`` runs it
    (a call of more than a dozen kernels gets :func:`gap_summary` instead)."""
    events = bench.time_ms(fn, [args], warmup=2, reps=reps)
    print(f"{label}: events {1e3 * events:.1f} us (bench.time_ms)")
    calls = profiled_calls(fn, args, reps)
    shapes = {len(call) for call in calls}
    if len(shapes) != 1:
        print(f"  kernels per call differ between repetitions: {sorted(shapes)}")
        calls = [call for call in calls if len(call) == min(shapes)]
    if min(shapes) > 12:
        return gap_summary(calls)
    for i in range(min(shapes)):
        start = statistics.median(call[i][1] for call in calls)
        end = statistics.median(call[i][2] for call in calls)
        print(f"  {bench.kernel_name(calls[0][i][0], 48):<48} {start:8.1f} -> {end:8.1f} us")


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    require_gpus(1, "bench/call_timeline.py")
    import torch
    import torch.nn.functional as F

    from kernels import get_loss, load
    from kernels.ops.cross_entropy import cross_entropy
    from kernels.ops.llm_head import LLM_CE_FILE, head_inputs, linear_cross_entropy

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
    for k in (12, 20):
        args = mse.make_inputs(bench.element_wise_shape(1 << k, "mse"), generator, "cuda")
        timeline(f"v5 mse 2^{k}", v5.mse, args)
        timeline(f"torch.compile mse 2^{k}", torch.compile(mse.reference, dynamic=False), args)

    def eager_head(h, w, t):
        return F.cross_entropy(h @ w.t(), t)

    inputs = head_inputs(8192, 4096, 128256)
    for name, loss_fn in (("fused (course)", linear_cross_entropy),
                          ("torch.compile", torch.compile(eager_head, dynamic=False))):
        timeline(f"LM head T=8192 H=4096 V=128256 bf16 fwd+bwd, {name}",
                 bench.training_step(loss_fn), inputs, reps=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
