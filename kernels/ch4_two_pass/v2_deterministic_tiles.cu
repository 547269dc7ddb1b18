// Chapter 4, version 2: two passes over fixed tiles, deterministic whatever the launch.
//
// Fixes (vs version 1): version 1 gives one partial per *block*, so its sum order, and so its
// last bits, change with the grid size (and with the GPU's SM count). Here every warp sums
// whole tiles of consecutive elements in a fixed order, one float partial per tile; the grid
// only decides which warp takes which tile. Pass 2 adds the tile partials in float64 in a fixed
// order with one block, divides by n and writes the 0-d result: no host round-trip.
// The tile size depends on n alone (never on the grid or the GPU): 512 elements for small
// inputs, doubling until there are at most 8192 tiles, at most kMaxTile. Small inputs get
// enough tiles to keep every SM busy; large ones few enough partials for pass 2 to read fast.
// Loads are 16 bytes wide, kUnroll of them per input per step of a warp.
// Still slow: at small sizes the two launches cost about 2 x the launch latency (version 3
// finishes in one launch).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "reduce.cuh"

constexpr int kThreads = 256;              // threads per block in pass 1
constexpr int kUnroll = 4;                 // 16-byte loads per input per step
constexpr int kStep = 32 * 4 * kUnroll;    // elements one warp reads per step: 512
constexpr int64_t kMaxTile = 16 * kStep;   // elements summed into one partial, at most: 8192
constexpr int64_t kWantedTiles = 8192;     // tiles grow until there are at most this many
constexpr int kFinalThreads = 1024;        // pass 2: one block

// Elements per tile for n inputs: a function of n only, so the sum order is fixed by n. The
// partials fit the workspace (LOSS_WORKSPACE_BYTES): at most 8192 (32 KiB) while tiles are
// smaller than kMaxTile, and one per kMaxTile >= 1024 inputs beyond.
static int64_t tile_size(int64_t n) {
    int64_t tile = kStep;
    while (tile < kMaxTile && ceil_div(n, tile) > kWantedTiles) tile *= 2;
    return tile;
}

// LOSS_KERNELS_BLOCKS=k, read once per process, caps the grid at k blocks: a test knob that
// shows the result does not depend on the grid (bench/reduction_targets.py uses it).
static int64_t grid_cap() {
    static const int64_t cap = [] {
        const char* text = getenv("LOSS_KERNELS_BLOCKS");
        return text ? atoll(text) : 0LL;
    }();
    return cap;
}

// A full tile with 16-byte loads. Lane l reads float4 number (step * kUnroll + u) * 32 + l.
template <class Loss, bool kBroadcast>
__device__ float full_tile_sum(const ReductionArgs& a, int64_t start, int steps, int lane) {
    const Loss loss;
    const float4* pred = reinterpret_cast<const float4*>(a.pred + start);
    const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : start));
    const uint32_t period = static_cast<uint32_t>(a.target_len);     // < 2^31 when kBroadcast
    const uint32_t base = kBroadcast ? static_cast<uint32_t>(start % a.target_len) : 0;
    float acc = 0.0f;
    for (int step = 0; step < steps; ++step) {
        float4 p[kUnroll], t[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int v = (step * kUnroll + u) * 32 + lane;
            p[u] = __ldcs(pred + v);  // streamed once: evict first, keep L2 for the targets
            t[u] = kBroadcast ? __ldg(target + (base + 4u * v) % period / 4) : __ldcs(target + v);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            acc += (loss(p[u].x, t[u].x) + loss(p[u].y, t[u].y)) +
                   (loss(p[u].z, t[u].z) + loss(p[u].w, t[u].w));
    }
    return acc;
}

// Any tile, one element at a time: the last, partial tile and inputs that are not 16-byte aligned.
template <class Loss>
__device__ float any_tile_sum(const ReductionArgs& a, int64_t start, int64_t end, int lane) {
    const Loss loss;
    const bool broadcast = a.target_len != a.n;
    float acc = 0.0f;
    for (int64_t i = start + lane; i < end; i += 32)
        acc += loss(a.pred[i], a.target[broadcast ? i % a.target_len : i]);
    return acc;
}

template <class Loss, bool kVector, bool kBroadcast>
__global__ void __launch_bounds__(kThreads) tile_partials(ReductionArgs a, float* partials,
                                                          int64_t tiles, int64_t tile_elems) {
    const int lane = threadIdx.x % 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
    for (int64_t tile = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / 32;
         tile < tiles; tile += warps) {
        const int64_t start = tile * tile_elems;
        const int64_t end = start + tile_elems < a.n ? start + tile_elems : a.n;
        const float sum = kVector && end - start == tile_elems
                              ? full_tile_sum<Loss, kBroadcast>(a, start,
                                                                static_cast<int>(tile_elems / kStep), lane)
                              : any_tile_sum<Loss>(a, start, end, lane);
        const float tile_sum = warp_sum(sum);
        if (lane == 0) partials[tile] = tile_sum;
    }
}

// Pass 2: thread t adds partials 4t..4t+3, then 4(t + 1024).., in float64, then a fixed tree.
// 16-byte loads, 4 in flight per thread: 8192 partials are two rounds of loads, not eight.
__global__ void __launch_bounds__(kFinalThreads) finish_mean(const float* partials, int64_t count,
                                                             int64_t n, float* out) {
    const float4* vectors = reinterpret_cast<const float4*>(partials);  // workspace: 256-byte aligned
    const int64_t nvec = count / 4;
    double acc = 0.0;
#pragma unroll 4
    for (int64_t v = threadIdx.x; v < nvec; v += kFinalThreads) {
        const float4 p = vectors[v];
        acc += (static_cast<double>(p.x) + p.y) + (static_cast<double>(p.z) + p.w);
    }
    for (int64_t i = 4 * nvec + threadIdx.x; i < count; i += kFinalThreads) acc += partials[i];
    acc = block_sum<kFinalThreads>(acc);  // complete in thread 0 (common/reduce.cuh)
    if (threadIdx.x == 0) *out = static_cast<float>(acc / static_cast<double>(n));
}

template <class Loss, bool kVector, bool kBroadcast>
static void launch_partials(const ReductionArgs* a, float* partials, int64_t tiles,
                            int64_t tile_elems, cudaStream_t stream) {
    const auto kernel = tile_partials<Loss, kVector, kBroadcast>;
    const int64_t needed = ceil_div(tiles, kThreads / 32);
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once: costs µs
    int64_t blocks = needed < resident ? needed : resident;
    if (grid_cap() > 0 && blocks > grid_cap()) blocks = grid_cap();
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(*a, partials, tiles, tile_elems);
}

template <class Loss>
static cudaError_t launch_two_pass(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tile_elems = tile_size(a->n);
    const int64_t tiles = ceil_div(a->n, tile_elems);
    float* partials = static_cast<float*>(a->workspace);
    const bool broadcast = a->target_len != a->n;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!broadcast || (a->target_len % 4 == 0 && a->target_len < (1LL << 31)));
    if (vector && broadcast)
        launch_partials<Loss, true, true>(a, partials, tiles, tile_elems, stream);
    else if (vector)
        launch_partials<Loss, true, false>(a, partials, tiles, tile_elems, stream);
    else
        launch_partials<Loss, false, false>(a, partials, tiles, tile_elems, stream);
    finish_mean<<<1, kFinalThreads, 0, stream>>>(partials, tiles, a->n, a->out);
    return cudaGetLastError();
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<MseLoss>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<SmoothL1Loss>(a, s);
}
extern "C" cudaError_t hinge_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<HingeLoss>(a, s);
}
