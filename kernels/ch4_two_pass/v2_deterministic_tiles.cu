// Chapter 4, version 2: two passes over fixed tiles, deterministic whatever the launch.
//
// Fixes (vs version 1): version 1 gives one partial per *block*, so its sum order, and so its
// last bits, change with the grid size (and with the GPU's SM count). Here every warp sums
// whole tiles of kTile consecutive elements in a fixed order, one float partial per tile; the
// grid only decides which warp takes which tile. Pass 2 adds the tile partials in float64 in a
// fixed order with one block, divides by n and writes the 0-d result: no host round-trip.
// Loads are 16 bytes wide, kUnroll of them per input in flight per thread.
// Still slow: nothing at large sizes (this runs at the read bandwidth); at small sizes the two
// launches cost about 2 x the launch latency (version 3 finishes in one launch).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;              // threads per block in pass 1
constexpr int kUnroll = 4;                 // 16-byte loads per input in flight per thread
constexpr int kStep = 32 * 4 * kUnroll;    // elements one warp reads per unrolled step: 512
constexpr int kTile = 16 * kStep;          // elements summed into one partial: 8192
constexpr int kFinalThreads = 1024;        // pass 2: one block

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// A full tile with 16-byte loads. Lane l reads float4 number (step * kUnroll + u) * 32 + l.
template <class Loss, bool kBroadcast>
__device__ float full_tile_sum(const ReductionArgs& a, int64_t start, int lane) {
    const Loss loss;
    const float4* pred = reinterpret_cast<const float4*>(a.pred + start);
    const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : start));
    const uint32_t period = static_cast<uint32_t>(a.target_len);     // < 2^31 when kBroadcast
    const uint32_t base = kBroadcast ? static_cast<uint32_t>(start % a.target_len) : 0;
    float acc = 0.0f;
    for (int step = 0; step < kTile / kStep; ++step) {
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
                                                          int64_t tiles) {
    const int lane = threadIdx.x % 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
    for (int64_t tile = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / 32;
         tile < tiles; tile += warps) {
        const int64_t start = tile * kTile;
        const int64_t end = start + kTile < a.n ? start + kTile : a.n;
        const float sum = kVector && end - start == kTile
                              ? full_tile_sum<Loss, kBroadcast>(a, start, lane)
                              : any_tile_sum<Loss>(a, start, end, lane);
        const float tile_sum = warp_sum(sum);
        if (lane == 0) partials[tile] = tile_sum;
    }
}

__global__ void __launch_bounds__(kFinalThreads) finish_mean(const float* partials, int64_t count,
                                                             int64_t n, float* out) {
    __shared__ double warp_sums[kFinalThreads / 32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += kFinalThreads) acc += partials[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = warp_sums[threadIdx.x];
        for (int offset = 16; offset > 0; offset >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (threadIdx.x == 0) *out = static_cast<float>(acc / static_cast<double>(n));
    }
}

template <class Loss, bool kVector, bool kBroadcast>
static void launch_partials(const ReductionArgs* a, float* partials, int64_t tiles,
                            cudaStream_t stream) {
    const auto kernel = tile_partials<Loss, kVector, kBroadcast>;
    const int64_t needed = ceil_div(tiles, kThreads / 32);
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once: costs µs
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a, partials, tiles);
}

template <class Loss>
static cudaError_t launch_two_pass(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tiles = ceil_div(a->n, kTile);
    float* partials = static_cast<float*>(a->workspace);
    const bool broadcast = a->target_len != a->n;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!broadcast || (a->target_len % 4 == 0 && a->target_len < (1LL << 31)));
    if (vector && broadcast)
        launch_partials<Loss, true, true>(a, partials, tiles, stream);
    else if (vector)
        launch_partials<Loss, true, false>(a, partials, tiles, stream);
    else
        launch_partials<Loss, false, false>(a, partials, tiles, stream);
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
