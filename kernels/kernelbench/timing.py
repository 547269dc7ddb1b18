"""KernelBench's timing (``src/kernelbench/timing.py``), with what the validator adds: the host's
wall clock beside the CUDA events, version counters bumped, and new inputs before every call.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .. import bench

PERF_TRIALS = bench.REPS  # 100, as run_and_check.py's num_perf_trials ($KERNELS_BENCH_REPS)
WARMUP_NEW = 3  # time_execution_with_cuda_event's num_warmup, for ModelNew
WARMUP_REFERENCE = 5  # measure_ref_program_time's num_warmup, for Model and torch.compile(Model)
DISCARD_FIRST = 1  # time_execution_with_cuda_event: the first timed trial is dropped
FLUSH_BYTES = 256 << 20  # clear_l2_cache writes 32 x 1024 x 1024 int64 before each trial


@dataclass
class Timing:
    """Per-trial times of one program, in ms: CUDA events on the current stream, and the host's
    wall time from before the L2 flush to after a device-wide synchronisation; ``failure``: the
    first timed call whose output was wrong for its inputs, if any (see :func:`time_trials`)."""

    event_ms: list
    wall_ms: list
    failure: str | None = None

    @property
    def mean(self) -> float:  # what KernelBench reports
        return statistics.fmean(self.event_ms)

    @property
    def median(self) -> float:
        return statistics.median(self.event_ms)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.event_ms)

    @property
    def hidden_ms(self) -> float:
        """Median of wall minus event time: latencies, plus any work the events did not see."""
        return statistics.median(w - e for w, e in zip(self.wall_ms, self.event_ms))

    def stats(self) -> dict:
        return {"mean": self.mean, "median": self.median, "std": self.std,
                "min": min(self.event_ms), "max": max(self.event_ms), "trials": len(self.event_ms)}


def bump_versions(tensors) -> None:
    """Bump the tensors' version counters, as an in-place write would."""
    bump = getattr(torch.autograd.graph, "increment_version", None)
    if bump is not None:
        for x in tensors:
            bump(x)


def time_trials(fn, args, trials: int | None = None, warmup: int = WARMUP_NEW,
                discard_first: int = DISCARD_FIRST, refill: Callable | None = None,
                verify: Callable | None = None) -> Timing:
    """``time_execution_with_cuda_event``'s method, with wall times beside the event times.

    Each trial: ``refill()``, if given, writes new values into ``args`` and returns what the
    output should be; bump the inputs' version counters; synchronise the device; start the wall
    clock; evict L2 by writing a buffer (256 MB or twice L2, as KernelBench does, where
    ``kernels.bench.time_ms`` reads one); record the start event, call, record the end event;
    synchronise the device (every stream), stop the wall clock; ``verify(output, expected)``, if given, says whether the output was
    right. Only the call is between the events: new inputs and checks cost the timing nothing.
    The flush runs on the GPU while the host records the start event and launches the call, so
    the events measure the GPU's work rather than the launch.
    """
    trials = trials or PERF_TRIALS
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    flush = torch.empty(max(2 * l2, FLUSH_BYTES), dtype=torch.int8, device="cuda")
    tensors = [x for x in args if isinstance(x, torch.Tensor)]
    failure = None
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
            torch.cuda.synchronize()
        events, walls = [], []
        for trial in range(trials + discard_first):
            expected = refill() if refill is not None else None
            bump_versions(tensors)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            began = time.perf_counter()
            flush.zero_()
            start.record()
            out = fn(*args)
            end.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - began) * 1e3
            if verify is not None and failure is None:
                why = verify(out, expected)
                failure = None if why is None else f"timed call {trial + 1}: {why}"
            del out, expected
            if trial >= discard_first:
                events.append(start.elapsed_time(end))
                walls.append(wall)
    del flush
    return Timing(events, walls, failure)


def gpu_only_ms(fn, args) -> float:
    """The GPU's time per call with the host queued ahead (``kernels.bench.queued_ms``): what is
    left of KernelBench's time once the host's launch work between two calls can no longer show
    as an idle GPU. Same inputs every call: only for a program that passed every check."""
    with torch.no_grad():
        return bench.queued_ms(fn, args)


# --- for evaluate_trusted (opt-in): time_trials with one timed call as a function of its own ---
# --- (the child makes it, timed_call), and on the CPU too (the host's clock, for its tests); ---
# --- time_trials above stays as chapter 9 shows it -------------------------------------------

def time_trials_anywhere(fn, args, trials: int | None = None, warmup: int = WARMUP_NEW,
                         discard_first: int = DISCARD_FIRST, refill: Callable | None = None,
                         verify: Callable | None = None) -> Timing:
    """:func:`time_trials`, each call made by :func:`timed_call`; on the CPU, with no events or
    L2 to flush, a call's event time is its wall time."""
    trials = trials or PERF_TRIALS
    tensors = [x for x in args if isinstance(x, torch.Tensor)]
    flush = flush_buffer(tensors)
    failure = None
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
            _sync(flush)
        events, walls = [], []
        for trial in range(trials + discard_first):
            expected = refill() if refill is not None else None
            bump_versions(tensors)
            out, event, wall = timed_call(fn, args, flush)
            if verify is not None and failure is None:
                why = verify(out, expected)
                failure = None if why is None else f"timed call {trial + 1}: {why}"
            del out, expected
            if trial >= discard_first:
                events.append(event)
                walls.append(wall)
    del flush
    return Timing(events, walls, failure)


def flush_buffer(tensors):
    """The buffer written before each timed call to evict L2 (None on the CPU, which has no
    events: there a timed call is the host's clock alone, for tests of the protocol)."""
    if not any(x.is_cuda for x in tensors):
        return None
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return torch.empty(max(2 * l2, FLUSH_BYTES), dtype=torch.int8, device="cuda")


def _sync(flush) -> None:
    if flush is not None:
        torch.cuda.synchronize()


def timed_call(fn, args, flush):
    """One timed call: (output, event ms, wall ms). The device synchronised before, the wall
    clock started, L2 flushed, the call between two events, the device synchronised after."""
    if flush is None:
        began = time.perf_counter()
        out = fn(*args)
        wall = (time.perf_counter() - began) * 1e3
        return out, wall, wall
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    began = time.perf_counter()
    flush.zero_()
    start.record()
    out = fn(*args)
    end.record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - began) * 1e3
    return out, start.elapsed_time(end), wall
