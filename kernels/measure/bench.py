"""Time GPU ops with CUDA events and turn times into effective bandwidth.

The method (book/timing.md explains each step): warm up first; time every call with a pair of
CUDA events behind an L2 clear and a sleep, and take the median (``events.py``); when the
inputs fit in L2, rotate among enough copies that each call reads from DRAM; count only the
bytes the loss must read (``Loss.min_bytes``); and compare with the GPU's read bandwidth
measured in the same process (:func:`read_bandwidth`).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

from ..losses import get_loss
# bench.time_ms, bench.REPS, ...: the names the notebooks and the scripts use
from .events import (LEAD_CYCLES, REPS, clear_and_lead, launch_overhead_ms,  # noqa: F401
                     queued_ms, time_ms)
from .profile import kernel_lines, kernel_name, kernel_times  # noqa: F401 (bench.kernel_times)

# SIZES, the problem sizes of the throughput plots: 2^12 to 2^30 elements, a step of 4x, up to
# $KERNELS_MAX_ELEMENTS or else what the GPU's memory holds. Computed on first use (module
# __getattr__ below), so that importing the toolkit never touches the GPU.
LARGEST = 1 << 30
# Eager PyTorch's MSE holds the two inputs, p - t and its square at once: four float32 values per
# element (Smooth L1 and Hinge no more). The sweep stops where that fits in this share of memory.
EAGER_BYTES_PER_ELEMENT = 16
MEMORY_SHARE = 0.8


def sweep_limit(usable_bytes: int | None) -> int:
    """The largest power of two up to 2^30 elements whose eager temporaries fit in
    ``MEMORY_SHARE`` of ``usable_bytes`` (no GPU: 2^30)."""
    limit = LARGEST
    if usable_bytes:
        while limit > 1 << 12 and limit * EAGER_BYTES_PER_ELEMENT > MEMORY_SHARE * usable_bytes:
            limit //= 2
    return limit


def free_memory() -> int:
    """Bytes this process can still allocate on the current GPU: the driver's free memory plus
    what PyTorch's allocator holds cached, within the process's share where
    ``torch.cuda.set_per_process_memory_fraction`` set one (capped at 15 GB, as the small-GPU
    run caps it, an 80 GB card sizes its work as a 15 GB card would). Other processes' memory
    (a second notebook) counts as taken."""
    import torch

    device = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(device)
    allocated = torch.cuda.memory_allocated(device)
    available = free + torch.cuda.memory_reserved(device) - allocated
    share = getattr(torch.cuda, "get_per_process_memory_fraction", lambda device: 1.0)(device)
    return max(0, min(available, int(share * total) - allocated))


def _max_elements() -> int:
    if os.environ.get("KERNELS_MAX_ELEMENTS"):
        return int(os.environ["KERNELS_MAX_ELEMENTS"])
    import torch

    if not torch.cuda.is_available():
        return LARGEST
    usable = free_memory()
    limit = sweep_limit(usable)
    if limit < LARGEST:
        largest = 1 << 2 * ((limit.bit_length() - 1) // 2)  # the last even power of two, as SIZES
        print(f"kernels.bench: {torch.cuda.get_device_name()} has {usable / 2**30:.1f} GiB free for "
              f"this process, so the sweeps stop at 2^{largest.bit_length() - 1} elements (eager "
              f"PyTorch holds {EAGER_BYTES_PER_ELEMENT} bytes per element at once); "
              "KERNELS_MAX_ELEMENTS overrides")
    return limit


def __getattr__(name: str):
    if name == "SIZES":
        limit = _max_elements()
        globals()["SIZES"] = tuple(1 << k for k in range(12, 31, 2) if 1 << k <= limit)
        return globals()["SIZES"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def gbps(nbytes: int, ms: float) -> float:
    """Effective bandwidth in GB/s (10^9 bytes per second)."""
    return nbytes / (ms * 1e-3) / 1e9


def rotation_count(bytes_per_call: int, l2_bytes: int, free_bytes: int, limit: int = 64) -> int:
    """How many copies of the inputs to rotate through so that L2 cannot hold them.

    Three times L2 of distinct data between two reads of the same buffer; at least 1, at most
    ``limit``, and never more than a quarter of the free memory.
    """
    wanted = -(-3 * l2_bytes // max(bytes_per_call, 1))
    affordable = max(free_bytes // 4 // max(bytes_per_call, 1), 1)
    return int(max(1, min(wanted, limit, affordable)))


def training_step(loss_fn, grad_output=None, scales=()):
    """``step(*inputs)``: the loss's share of a training step, forward then
    ``backward(grad_output)``, with the gradient of every input that requires one cleared first
    (the prediction; an LM head's hidden states and weight), so that no step accumulates into the
    last one's. With ``scales``, each step's loss is multiplied by the next of them in turn
    before its backward, as a loss-scaled training loop does (``scales=(1024.0,)``: always
    1024)."""
    import itertools

    turns = itertools.cycle(scales or (None,))

    def step(*inputs):
        for x in inputs:
            if getattr(x, "requires_grad", False):
                x.grad = None
        loss, scale = loss_fn(*inputs), next(turns)
        (loss if scale is None else loss * scale).backward(grad_output)
    return step


def in_turns(fns: dict, arg_sets, turns: int = 5, reps: int = 30) -> dict:
    """``{name: [ms of each turn]}``: every function of ``fns`` timed by :func:`time_ms`, one
    after the other, ``turns`` times, so that a drift of the GPU's clock during the run falls on
    all of them alike (timed once each, one after the other, chapter 6 once measured a step at
    1.11x another of the same cost: bench/PERFLOG.md, session 19)."""
    times = {name: [] for name in fns}
    for _ in range(turns):
        for name, fn in fns.items():
            times[name].append(time_ms(fn, arg_sets, reps=reps))
    return times


def patched(fn, owner, name: str, value):
    """``fn`` run with ``owner.name`` set to ``value`` for each call, then put back (an error
    too): to time a step against the same step with one switch off, e.g. the loss-scaling
    guess, ``patched(step, grad_guess, "wanted", lambda *_: False)``."""
    def run(*args):
        kept = getattr(owner, name)
        setattr(owner, name, value)
        try:
            return fn(*args)
        finally:
            setattr(owner, name, kept)
    return run


def read_bandwidth(nbytes: int = 1 << 32) -> float:
    """The GPU's read bandwidth in GB/s: ``torch.sum`` over a float32 tensor of ``nbytes``.

    4 GiB by default, less when the GPU has little free memory.
    """
    import torch

    nbytes = min(nbytes, free_memory() // 2) // 4 * 4
    x = torch.rand(nbytes // 4, device="cuda")
    ms = time_ms(torch.sum, [(x,)], warmup=5, reps=30)
    del x
    return gbps(nbytes, ms)


def copy_bandwidth(nbytes: int = 1 << 32) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    import torch

    nbytes = min(nbytes, free_memory() // 3) // 4 * 4
    src = torch.rand(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(dst.copy_, [(src,)], warmup=5, reps=30)
    del src, dst
    return gbps(2 * nbytes, ms)


@dataclass
class Measurement:
    loss: str
    provider: str
    shape: tuple
    bytes: int
    ms: float

    @property
    def gbps(self) -> float:
        return gbps(self.bytes, self.ms)


def bench_loss(providers: dict, loss_name: str, shape, dtype=None, reps: int | None = None,
               seed: int = 0) -> list[Measurement]:
    """Time every provider (name -> callable) on the same inputs of one shape."""
    import torch

    loss = get_loss(loss_name)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    first = loss.make_inputs(shape, generator, "cuda", dtype)
    element_size = first[0].element_size()
    nbytes = loss.min_bytes(shape, element_size)
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    copies = rotation_count(nbytes, properties.L2_cache_size, free_memory())
    arg_sets = [first] + [loss.make_inputs(shape, generator, "cuda", dtype)
                          for _ in range(copies - 1)]
    results = []
    for name, fn in providers.items():
        ms = time_ms(fn, arg_sets, reps=reps)
        results.append(Measurement(loss_name, name, tuple(shape), nbytes, ms))
    del arg_sets, first
    torch.cuda.empty_cache()
    return results


def bench_loss_runs(providers: dict, loss_name: str, shape, runs: int = 3,
                    **kwargs) -> list[list[Measurement]]:
    """:func:`bench_loss` run ``runs`` times in turn: one list of measurements per run, in
    ``providers``' order. Each run starts one provider further along the order: a place in the
    order once moved a kernel's median by a tenth, in two passes (bench/PERFLOG.md, session 25)."""
    names, samples = list(providers), []
    for run in range(runs):
        order = names[run % len(names):] + names[:run % len(names)]
        measured = {m.provider: m for m in bench_loss({name: providers[name] for name in order},
                                                      loss_name, shape, **kwargs)}
        samples.append([measured[name] for name in names])
    return samples


def median_of_runs(samples: list[list[Measurement]]) -> list[Measurement]:
    """Each provider's median time over :func:`bench_loss_runs`' runs."""
    return [Measurement(first.loss, first.provider, first.shape, first.bytes,
                        statistics.median(run[i].ms for run in samples))
            for i, first in enumerate(samples[0])]


def bench_loss_median(providers: dict, loss_name: str, shape, runs: int = 3,
                      **kwargs) -> list[Measurement]:
    """:func:`bench_loss` run ``runs`` times in turn, each provider's median time: a single run
    of a ten-microsecond kernel moves by a few percent, and now and then a host stall spoils a
    whole measurement; the median of three ignores one. For targets at 1.00x, not for sweeps."""
    return median_of_runs(bench_loss_runs(providers, loss_name, shape, runs, **kwargs))


def median_against_compile(ops: dict, loss_name: str, n: int, runs: int = 3) -> list[Measurement]:
    """torch.compile (dynamic=False) of the loss's reference, as provider "torch.compile", and
    each of ``ops`` (label: op) at ``n`` elements, timed side by side by
    :func:`bench_loss_median`: how the probes put builds of one kernel beside Inductor's."""
    import torch

    providers = {"torch.compile": torch.compile(get_loss(loss_name).reference, dynamic=False)}
    providers.update(ops)
    return bench_loss_median(providers, loss_name, element_wise_shape(n, loss_name), runs=runs)


def sweep(providers: dict, loss_name: str, shapes, **kwargs) -> list[Measurement]:
    """:func:`bench_loss` over several shapes (the throughput-against-size plots)."""
    results = []
    for shape in shapes:
        results += bench_loss(providers, loss_name, shape, **kwargs)
    return results


def bandwidth_target(fn, loss_name: str, shape, target: float, peak: float,
                     label: str = "your kernel", dtype=None) -> bool:
    """An exercise's performance check: time ``fn`` on ``loss_name``'s inputs of ``shape`` and
    print PASS or MISS against ``target``, a fraction of ``peak`` (GB/s), with how far it is.

    The time is :func:`bench_loss`'s (CUDA events, inputs rotated past the L2), so it compares
    with the chapter's tables; a MISS by a few percent can be noise: rerun before you dig.
    """
    [m] = bench_loss({label: fn}, loss_name, shape, dtype=dtype)
    fraction = m.gbps / peak
    goal_ms = m.bytes / (target * peak * 1e6)
    where = f"{label}, {loss_name} {'x'.join(map(str, shape))}"
    line = (f"{m.gbps:.0f} GB/s, {fraction:.0%} of {peak:.0f} GB/s in {m.ms:.3f} ms "
            f"(target {target:.0%}: {goal_ms:.3f} ms)")
    if fraction >= target:
        print(f"PASS  {where}: {line}")
        return True
    print(f"MISS  {where}: {line}: {m.ms / goal_ms - 1:.0%} slower than the target")
    return False


def speedup_target(fn, reference, loss_name: str, shape, target: float,
                   label: str = "your kernel", reference_label: str = "reference",
                   reps: int | None = None, gpu_time: bool = False) -> bool:
    """An exercise's performance check against another op, timed side by side on the same
    inputs: PASS when ``fn`` is at least ``target`` times as fast as ``reference``.

    ``gpu_time=True`` times both with :func:`queued_ms`, the host queued ahead: for a training
    step, whose autograd bookkeeping can take the host longer than the GPU takes to run its
    kernels, so that per-call events would time the host (the same for a fast and a slow
    kernel) rather than the kernels."""
    if gpu_time:
        import torch

        generator = torch.Generator(device="cuda").manual_seed(0)
        args = get_loss(loss_name).make_inputs(shape, generator, "cuda", None)
        mine_ms, theirs_ms = queued_ms(fn, args), queued_ms(reference, args)
    else:
        mine, theirs = bench_loss({label: fn, reference_label: reference}, loss_name, shape,
                                  reps=reps)
        mine_ms, theirs_ms = mine.ms, theirs.ms
    speedup = theirs_ms / mine_ms
    where = f"{label}, {loss_name} {'x'.join(map(str, shape))}"
    line = (f"{mine_ms:.3f} ms against {theirs_ms:.3f} ms for {reference_label}"
            f"{' (GPU time, host queued ahead)' if gpu_time else ''}: "
            f"{speedup:.2f}x (target {target:g}x)")
    print(f"{'PASS' if speedup >= target else 'MISS'}  {where}: {line}")
    return speedup >= target


def element_wise_shape(n: int, loss_name: str) -> tuple:
    """The benchmark shape for n elements: 1-D, or square-ish 2-D for a loss whose target is
    one row (Hinge: KernelBench's (N, N) predictions with (N,) labels)."""
    if get_loss(loss_name).broadcast_target:
        cols = 1 << ((n.bit_length() - 1) // 2)
        return (n // cols, cols)
    return (n,)
