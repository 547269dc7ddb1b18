"""A loss's providers timed by their kernels' span, beside the events' timing of bench.

``bench.time_ms`` times a call between two CUDA events; at a few microseconds per call the events
hold a few microseconds more than the kernels, which moved identical builds' ratios by up to a
tenth (chapter 4). :func:`loss_spans` times the same calls, queued the same way, from the first
kernel's start to the last kernel's end (:func:`call_span_ms`), and names each provider with
:data:`KERNELS` so that its rows sit beside the events' rows in one results file.
"""

from __future__ import annotations

from .bench import Measurement, clear_and_lead

KERNELS = " (kernels)"  # appended to a provider's name for its kernels' span

SLEEP_KERNEL = "spin"  # the kernel of torch.cuda._sleep, queued before each timed call
LEAD_SLEEP_US = 50  # the lead's sleep lasts ~500 µs; the empty launches before it (sleeps of 0
# cycles, events.clear_and_lead) a few µs


def calls_between_sleeps(events, clear_events: int) -> list[list]:
    """The device events ``(name, start, end)`` of each call queued as :func:`bench.time_ms`
    queues it (a clear of ``clear_events`` events, empty sleeps, the lead's sleep, the call): for
    each lead's sleep, the events after it and before the next call's empty sleeps and clear."""
    events = sorted(events, key=lambda event: event[1])

    def sleep(i):
        return SLEEP_KERNEL in events[i][0]

    leads = [i for i in range(len(events))
             if sleep(i) and events[i][2] - events[i][1] > LEAD_SLEEP_US]

    def lead_start(i):  # where the lead ending in the sleep at i begins
        while i > 0 and sleep(i - 1):
            i -= 1
        return i - clear_events

    stops = [lead_start(i) for i in leads[1:]] + [len(events)]
    return [events[lead + 1:stop] for lead, stop in zip(leads, stops)]


def call_span_ms(fn, arg_sets, before_call, calls: int = 40) -> float:
    """Median time from the start of ``fn``'s first kernel to the end of its last, per call
    (torch.profiler), each call queued behind ``before_call()`` (``bench.clear_and_lead()``, as
    ``bench.time_ms`` queues it): the call's GPU work without what its events hold around it
    (chapter 4 measures how much that moves between builds of one file)."""
    import statistics

    import torch
    from torch.profiler import ProfilerActivity, profile

    def device_events(prof):
        return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA]

    for i in range(3):
        fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        before_call()
        torch.cuda.synchronize()
    clear_events = sum(SLEEP_KERNEL not in name for name, *_ in device_events(prof))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            before_call()
            fn(*arg_sets[i % len(arg_sets)])
        torch.cuda.synchronize()
    groups = calls_between_sleeps(device_events(prof), clear_events)
    if len(groups) != calls or not all(groups):
        raise RuntimeError(f"expected {calls} calls with kernels, found {len(groups)}")
    return statistics.median(max(e[2] for e in g) - min(e[1] for e in g) for g in groups) / 1e3


def loss_spans(providers: dict, loss_name: str, shape, seed: int = 0) -> list[Measurement]:
    """Each provider's (name -> callable) kernels' span on one set of the loss's inputs at
    ``shape`` (seeded by ``seed``), each call behind bench's L2 clear and sleep."""
    import torch

    from ..losses import get_loss

    loss = get_loss(loss_name)
    inputs = [loss.make_inputs(shape, torch.Generator(device="cuda").manual_seed(seed), "cuda")]
    before_call = clear_and_lead()
    return [Measurement(loss_name, name + KERNELS, tuple(shape), loss.min_bytes(shape),
                        call_span_ms(fn, inputs, before_call)) for name, fn in providers.items()]
