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

# GPU clock cycles of the sleep before each timed call: ~0.5 ms on an H100 (clear_and_lead: why),
# or longer where the call's host work needs it: the sleep lasts at least HOST_LEADS times the
# median host time of a warm-up call (time_ms).
LEAD_CYCLES = 1_000_000
HOST_LEADS = 4

# Each timed call follows 0 to PHASE_LAUNCHES - 1 one-block launches, a random count per call
# (clear_and_lead: why).
PHASE_LAUNCHES = 32

# GPU clock cycles of the sleep queued_ms puts in front of its calls: about 30 ms at H100 clocks,
# longer than the host takes to launch them.
QUEUE_CYCLES = 50_000_000


def clear_and_lead(clear: str = "read", seed: int = 0, sleep_cycles: int = LEAD_CYCLES):
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
    - a sleep kernel of ``sleep_cycles``. Together they keep the GPU busy (about 0.6 ms on an
      H100) while Python launches the call, so that the events time the GPU's work, not the
      host's launch (:func:`launch_overhead_ms`), even through a short host stall or slow call
      (a torch.compile'd one can take the host 0.6 ms: PERFLOG, session 28; :func:`time_ms`
      sleeps longer before a call whose host work takes longer).

    ``bench/call_timeline.py`` and ``spans.call_span_ms`` queue it too."""
    import torch

    check_clear(clear)
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    buffer = torch.ones(max(2 * l2, 256 << 20) // 4, device="cuda")
    evict = buffer.sum if clear == "read" else buffer.zero_
    draw = random.Random(seed)

    def before_call():
        evict()
        for _ in range(draw.randrange(PHASE_LAUNCHES)):
            torch.cuda._sleep(0)
        torch.cuda._sleep(sleep_cycles)
    return before_call


def check_clear(clear: str) -> None:
    if clear not in ("read", "write"):
        raise ValueError(f"clear must be 'read' or 'write', not {clear!r}")


_cycles_per_ms: dict[int, float] = {}


def sleep_cycles_per_ms() -> float:
    """The rate of ``torch.cuda._sleep`` on the current GPU (its clock), timed once by events."""
    import torch

    device = torch.cuda.current_device()
    if device not in _cycles_per_ms:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(LEAD_CYCLES)  # the clock up before the timed sleep
        start.record()
        torch.cuda._sleep(LEAD_CYCLES)
        end.record()
        end.synchronize()
        _cycles_per_ms[device] = LEAD_CYCLES / start.elapsed_time(end)
    return _cycles_per_ms[device]


def sleep_for(host_ms: list[float]) -> int:
    """Cycles of the lead's sleep for a call whose warm-up calls took the host ``host_ms``:
    ``LEAD_CYCLES``, or ``HOST_LEADS`` times their median if that is longer (a training step's
    autograd work takes the host 0.2-0.3 ms a step, and now and then 1 ms: PERFLOG, session 29)."""
    if not host_ms:
        return LEAD_CYCLES
    return max(LEAD_CYCLES, round(HOST_LEADS * statistics.median(host_ms) * sleep_cycles_per_ms()))


def time_ms(fn, arg_sets, warmup: int = 10, reps: int | None = None,
            clear: str = "read") -> float:
    """Median GPU time of ``fn(*args)`` in milliseconds, cycling through ``arg_sets``, each call
    queued behind :func:`clear_and_lead`'s L2 clear and sleep (``clear`` picks the clear), the
    sleep long enough for the host time of the warm-up's later calls (:func:`sleep_for`)."""
    import torch

    check_clear(clear)
    reps = reps or REPS
    host_ms = []
    for i in range(warmup):
        started = time.perf_counter()
        fn(*arg_sets[i % len(arg_sets)])
        host_ms.append(1e3 * (time.perf_counter() - started))
    sleep_cycles = sleep_for(host_ms[warmup // 2:])
    before_call = clear_and_lead(clear, sleep_cycles=sleep_cycles)
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
