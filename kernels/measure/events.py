"""How one call is timed on the GPU: what is queued before it, and the events around it.

``bench`` builds on these (sizes, bandwidth, the losses' inputs, targets); book/timing.md
explains each step. Every timed call is queued behind :func:`clear_and_lead`: an L2 clear, a
random number of one-block launches, and a sleep kernel.
"""

from __future__ import annotations

import os
import random
import statistics
import time

# A validation run (pytest --nbval, whose checks ignore timings) may ask for fewer repetitions
# and smaller sizes; published measurements use the defaults.
REPS = int(os.environ.get("KERNELS_BENCH_REPS", 100))

# GPU clock cycles of the sleep before each timed call: ~0.5 ms on an H100 (clear_and_lead: why).
LEAD_CYCLES = 1_000_000

# Each timed call follows 0 to PHASE_LAUNCHES - 1 one-block launches, a random count per call
# (clear_and_lead: why).
PHASE_LAUNCHES = 32

# GPU clock cycles of the sleep queued_ms puts in front of its calls: about 30 ms at H100 clocks,
# longer than the host takes to launch them.
QUEUE_CYCLES = 50_000_000


def clear_and_lead(clear: str = "read", seed: int = 0):
    """A function that queues what :func:`time_ms` puts before each timed call:

    - a read of a buffer of 256 MB or twice L2, which evicts the inputs from L2
      (``clear="write"`` writes it instead, as ``triton.testing.do_bench`` does: the lines it
      leaves modified in L2 are written back by the timed call as its reads evict them, about
      10 µs more per call on an H100; chapter 7 measures it);
    - 0 to ``PHASE_LAUNCHES - 1`` empty one-block kernels, a count drawn at random (``seed``) for
      each call. What ran before a call moves where its blocks run, and with it the time of a
      call of a few microseconds: by up to 0.8 µs at 2^12-2^22 elements on an H100, the state
      held through a whole measurement and changing between measurements, so that two
      providers timed one after the other read up to 1.12x apart in either direction
      (bench/PERFLOG.md, session 29). Each call starts from a state drawn at random instead,
      and a median is over those states;
    - a sleep kernel. Together they keep the GPU busy (about 0.6 ms on an H100) while Python
      launches the call, so that the events time the GPU's work, not the host's launch
      (:func:`launch_overhead_ms`), even through a short host stall or slow call (a
      torch.compile'd one can take the host 0.6 ms: PERFLOG, session 28).

    ``bench/call_timeline.py`` and ``spans.call_span_ms`` queue it too."""
    import torch

    if clear not in ("read", "write"):
        raise ValueError(f"clear must be 'read' or 'write', not {clear!r}")
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    buffer = torch.ones(max(2 * l2, 256 << 20) // 4, device="cuda")
    evict = buffer.sum if clear == "read" else buffer.zero_
    draw = random.Random(seed)

    def before_call():
        evict()
        for _ in range(draw.randrange(PHASE_LAUNCHES)):
            torch.cuda._sleep(0)
        torch.cuda._sleep(LEAD_CYCLES)
    return before_call


def time_ms(fn, arg_sets, warmup: int = 10, reps: int | None = None,
            clear: str = "read") -> float:
    """Median GPU time of ``fn(*args)`` in milliseconds, cycling through ``arg_sets``, each call
    queued behind :func:`clear_and_lead`'s L2 clear and sleep (``clear`` picks the clear)."""
    import torch

    before_call = clear_and_lead(clear)
    reps = reps or REPS
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        args = arg_sets[i % len(arg_sets)]
        before_call()
        starts[i].record()
        fn(*args)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def launch_overhead_ms(fn, args, reps: int = 200) -> float:
    """Median wall time of one call including the host's launch cost (what a Python loop sees)."""
    import torch

    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def queued_ms(fn, args, iters=20, repeats=5):
    """GPU time per call with the host queued ahead: a sleep kernel holds the GPU while the host
    launches ``iters`` calls, so autograd's host work between kernels never shows as idle GPU
    (per-call events see it whenever the host falls behind). Median over ``repeats``."""
    import torch

    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(QUEUE_CYCLES)
        start.record()
        for _ in range(iters):
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)
