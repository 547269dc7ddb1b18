"""Why torch.compile's program led version 5's single block at 2^12 elements (the bounds checks,
which version 5's full-block copy now drops): a probe, not a benchmark (bench/PERFLOG.md,
sessions 24 and 25).

    python bench/one_block_probe.py             # on the GPU machine (sm_90), about a minute
    python bench/one_block_probe.py --dynamic   # torch.compile(dynamic=True) beside them

The MSE mean of 4096 floats, one launch each: Inductor's program (``dynamic=False``, the course's
baseline), version 5's op, and copies of a single-block kernel built side by side in one
kernel file, one op each, by the course's loader (``VARIANTS``): threads x 16-byte loads per input, the load instruction,
bounds checks or none (Inductor's program has the size as a constant, so its checks fold away),
the block sum with one barrier or with ``common/reduce.cuh``'s two, a cluster of blocks that
gather their sums over distributed shared memory. Prints each one's time / Inductor's (7 turns
of 200 calls after the read clear, then warm: the sleep alone), the launch record of Inductor's
program and of version 5's (grid, block, registers, from the profiler's trace) and the kernels'
own times. ``--dynamic`` times ``dynamic=True`` (one program for every size, as version 5 is
one kernel) against the baseline and version 5 at 2^12, 3000, 2^13 and 2^14 elements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (threads, loads per input per thread, load: 0 plain / 1 __ldcs / 2 __ldg, bounds checks,
# one barrier in the block sum, the mean as a multiply), or ("cluster", blocks, threads, loads)
VARIANTS = {
    "1024x4 (v5's shape)": (1024, 4, 0, True, False, False),
    "1024x1": (1024, 1, 0, True, False, False),
    "512x2": (512, 2, 0, True, False, False),
    "256x4": (256, 4, 0, True, False, False),
    "128x8": (128, 8, 0, True, False, False),
    "1024x4 __ldcs": (1024, 4, 1, True, False, False),
    "1024x4 __ldg": (1024, 4, 2, True, False, False),
    "1024x4, mean by multiply": (1024, 4, 0, True, False, True),
    "1024x1, no checks": (1024, 1, 0, False, False, False),
    "512x2, no checks": (512, 2, 0, False, False, False),
    "256x4, no checks": (256, 4, 0, False, False, False),
    "1024x1, one barrier": (1024, 1, 0, True, True, False),
    "1024x1, no checks, one barrier": (1024, 1, 0, False, True, False),
    "512x2, no checks, one barrier": (512, 2, 0, False, True, False),
    "256x4, no checks, one barrier": (256, 4, 0, False, True, False),
    "cluster 2 x 512x1": ("cluster", 2, 512, 1),
    "cluster 4 x 256x1": ("cluster", 4, 256, 1),
    "cluster 8 x 128x1": ("cluster", 8, 128, 1),
}
N = 4096  # the variants without checks read exactly threads x loads x 4 elements: 4096

KERNELS = r'''
#include <cuda_runtime.h>
#include <stdint.h>
#include <cooperative_groups.h>
#include "loss_args.h"
#include "reduce.cuh"
namespace cg = cooperative_groups;

__device__ __forceinline__ float sq(float p, float t) { const float d = p - t; return d * d; }
template <int kLoad> __device__ __forceinline__ float4 ld(const float4* p) {
    return kLoad == 1 ? __ldcs(p) : kLoad == 2 ? __ldg(p) : *p;
}
template <int kBlock> __device__ __forceinline__ float block_sum_one_barrier(float v) {
    __shared__ float warp_sums[kBlock / 32];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) v = warp_sum(threadIdx.x < kBlock / 32 ? warp_sums[threadIdx.x] : 0.0f);
    return v;
}
// Every load issued before any arithmetic, as version 5's one_block_mean_vec does.
template <int kBlock, int kLoads, int kLoad, bool kChecks, bool kOneBarrier, bool kMul>
__global__ void __launch_bounds__(kBlock)
one(const float* __restrict__ pred, const float* __restrict__ target, float* out, int n) {
    const float4* p4 = reinterpret_cast<const float4*>(pred);
    const float4* t4 = reinterpret_cast<const float4*>(target);
    const int nvec = n / 4;
    float4 p[kLoads], t[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
        const int v = threadIdx.x + u * kBlock;
        if (!kChecks || v < nvec) { p[u] = ld<kLoad>(p4 + v); t[u] = ld<kLoad>(t4 + v); }
    }
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
        if (!kChecks || threadIdx.x + u * kBlock < nvec)
            acc += (sq(p[u].x, t[u].x) + sq(p[u].y, t[u].y)) +
                   (sq(p[u].z, t[u].z) + sq(p[u].w, t[u].w));
    const float sum = kOneBarrier ? block_sum_one_barrier<kBlock>(acc) : block_sum<kBlock>(acc);
    if (threadIdx.x == 0) *out = kMul ? sum * (1.0f / n) : sum / static_cast<float>(n);
}
// A cluster of kCluster blocks, each reading its share: each block's sum goes into rank 0's
// shared memory, then one cluster barrier, then rank 0 adds them in rank order.
template <int kCluster, int kBlock, int kLoads>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kBlock)
clustered(const float* __restrict__ pred, const float* __restrict__ target, float* out, int n) {
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    __shared__ float sums[kCluster];
    const float4* p4 = reinterpret_cast<const float4*>(pred) + rank * (kBlock * kLoads);
    const float4* t4 = reinterpret_cast<const float4*>(target) + rank * (kBlock * kLoads);
    float4 p[kLoads], t[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
        p[u] = p4[threadIdx.x + u * kBlock];
        t[u] = t4[threadIdx.x + u * kBlock];
    }
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
        acc += (sq(p[u].x, t[u].x) + sq(p[u].y, t[u].y)) +
               (sq(p[u].z, t[u].z) + sq(p[u].w, t[u].w));
    const float sum = block_sum_one_barrier<kBlock>(acc);
    if (threadIdx.x == 0) *cluster.map_shared_rank(&sums[rank], 0) = sum;
    cluster.sync();
    if (rank == 0 && threadIdx.x == 0) {
        float total = 0.0f;
        for (int r = 0; r < kCluster; ++r) total += sums[r];
        *out = total / static_cast<float>(n);
    }
}
'''


def launches() -> str:
    """One launcher per variant: ``variant<i>_launch`` becomes the op ``variant<i>`` (op names
    start with a letter), all taking the course's ``ReductionArgs`` like version 5's ``mse``."""
    cases = []
    for i, spec in enumerate(VARIANTS.values()):
        if spec[0] == "cluster":
            _, blocks, threads, loads = spec
            kernel, grid = f"clustered<{blocks}, {threads}, {loads}>", blocks
        else:
            threads, loads, load, checks, one_barrier, mul = spec
            flags = ", ".join(str(f).lower() for f in (checks, one_barrier, mul))
            kernel, grid = f"one<{threads}, {loads}, {load}, {flags}>", 1
        cases.append(f'extern "C" cudaError_t variant{i}_launch(const ReductionArgs* a, '
                     f"cudaStream_t s) {{\n"
                     f"    {kernel}<<<{grid}, {threads}, 0, s>>>(a->pred, a->target, a->out, "
                     f"static_cast<int>(a->n));\n"
                     f"    return cudaGetLastError();\n}}\n")
    return "\n".join(cases)


def build_variants(archs=None):
    """The variants' ops, built by ``kernels.load`` (its toolkit and cache, as every kernel of
    the course) from a file under the git-ignored .scratch: load builds files inside the
    repository only."""
    from kernels import load

    path = ROOT / ".scratch" / "one_block_probe.cu"
    path.parent.mkdir(exist_ok=True)
    path.write_text(KERNELS + launches())
    return load(path, archs=archs)


def median_us(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def cold_and_warm(fns: dict, p, t) -> None:
    """Each function's time / Inductor's: after the read clear (bench.time_ms), then warm."""
    import torch

    from kernels import bench

    cold = bench.in_turns(fns, [(p, t)], turns=7, reps=200)
    warm = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
            for start, end in zip(starts, ends):
                torch.cuda._sleep(bench.LEAD_CYCLES)
                start.record()
                fn(p, t)
                end.record()
            torch.cuda.synchronize()
            warm[name].append(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)))
    base_cold, base_warm = median_us(cold["torch.compile"]), median_us(warm["torch.compile"])
    print(f"{torch.cuda.get_device_name()}: MSE mean of {N} floats, time / torch.compile's "
          "(cold: median of 7 turns after the read clear; warm: of 5, the sleep alone)")
    for name in fns:
        us = median_us(cold[name])
        print(f"  {name:<32} cold {us:5.2f} us x{us / base_cold:.3f}"
              f"   warm x{median_us(warm[name]) / base_warm:.3f}")


def launch_records(fns: dict, p, t) -> None:
    """Grid, block, registers of each kernel the first two functions launch (the trace's args)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for fn in list(fns.values())[:2]:
            fn(p, t)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    for event in events:
        if event.get("cat") == "kernel":
            args = event.get("args", {})
            print(f"  launch {event['name'][:44]:<44} grid {args.get('grid')} "
                  f"block {args.get('block')} registers {args.get('registers per thread')}")


def dynamic_against_static() -> None:
    """torch.compile for the one size (the baseline), for every size, and version 5."""
    import torch
    import torch.nn.functional as F

    from kernels import Chapter, bench, load

    Chapter.allow_recompiles(64)
    v5 = load("ch4_two_pass/v5_block_tiles.cu")
    dynamic = torch.compile(F.mse_loss, dynamic=True)
    for n in (1 << 12, 3000, 1 << 13, 1 << 14):
        ms = {m.provider: m.ms for m in bench.median_against_compile(
            {"torch.compile, dynamic=True": dynamic, "v5": v5.mse}, "mse", n, runs=7)}
        base = ms.pop("torch.compile")
        print(f"  mse {n:>5} elements: torch.compile {1e3 * base:4.1f} us   "
              + "   ".join(f"{name} x{t / base:.3f}" for name, t in ms.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dynamic", action="store_true", help="also torch.compile(dynamic=True)")
    args = parser.parse_args()
    from kernels.build.toolchain import require_gpus

    require_gpus(1, "bench/one_block_probe.py")
    import torch
    import torch.nn.functional as F

    from kernels import load

    if torch.cuda.get_device_capability() < (9, 0):  # the clusters need Hopper
        print("bench/one_block_probe.py needs a GPU of compute capability 9.0 (Hopper) or newer.")
        return 2
    module = build_variants()
    g = torch.Generator(device="cuda").manual_seed(0)
    p, t = (torch.randn(N, device="cuda", generator=g) for _ in range(2))
    fns = {"torch.compile": torch.compile(F.mse_loss, dynamic=False),
           "v5's op": load("ch4_two_pass/v5_block_tiles.cu").mse}
    fns.update({name: getattr(module, f"variant{i}") for i, name in enumerate(VARIANTS)})
    expected = F.mse_loss(p.double(), t.double()).item()
    for name, fn in fns.items():
        assert abs(fn(p, t).item() - expected) <= 1e-5 * expected, name
    cold_and_warm(fns, p, t)
    launch_records(fns, p, t)
    if args.dynamic:
        dynamic_against_static()
    return 0


if __name__ == "__main__":
    sys.exit(main())
