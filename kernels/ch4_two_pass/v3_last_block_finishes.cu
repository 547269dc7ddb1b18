// Chapter 4, version 3: one launch; the last block to finish adds the tile partials.
//
// Fixes (vs version 2): the second launch. Pass 1 is version 2's tile loop; then each
// block makes its partials visible to the whole GPU (__threadfence()) and counts itself done
// with atomicInc on a counter. The block that sees count == gridDim.x - 1 knows every other
// block's partials are written, and adds them all, in float64, in an order fixed by its thread
// index (never by which block came last): the same bits for any grid. A single-block launch
// (small n) skips the counter. atomicInc(counter, gridDim.x - 1) wraps back to 0 on the last
// block's increment, so the counter is ready for the next launch with no extra work.
// Where the counter lives (both are here; bench/PERFLOG.md has the measurements):
//  - mse, smooth_l1, hinge: in the workspace, zeroed with cudaMemsetAsync before a launch of
//    more than one block. Always safe; costs one more operation on the stream (0.6-1.3 µs
//    measured on an H100 below 2^22 elements, nothing measurable at 2^30).
//  - mse_global_counter: a __device__ global, initialised to 0 when the module loads and left
//    at 0 by every launch: no memset. Safe only while one such launch runs at a time on a
//    device: two launches in flight on two streams would count into the same counter (kernels
//    on one stream, PyTorch's default, never overlap).
// Also new: above kPlainLoadsFrom elements the inputs are read with ordinary loads instead of
// streaming ones (measured faster there; slower at 2^24).
// Still slow: the last block adds all partials alone while the rest of the GPU idles (a few µs
// at 2^30); nothing else: one launch, reads at the bandwidth.
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
// From this many elements on, pred and target are read with ordinary loads instead of streaming
// ones (__ldcs, evict-first). Measured on an H100 (bench/PERFLOG.md): streaming is 8-14% faster
// at 2^24 elements, ordinary loads 0.4-1.2% faster at 2^30.
constexpr int64_t kPlainLoadsFrom = 1LL << 27;

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

template <bool kStreaming>
__device__ __forceinline__ float4 load4(const float4* p) {
    return kStreaming ? __ldcs(p) : *p;
}

// A full tile with 16-byte loads. Lane l reads float4 number (step * kUnroll + u) * 32 + l.
template <class Loss, bool kBroadcast, bool kStreaming>
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
            p[u] = load4<kStreaming>(pred + v);  // read once
            t[u] = kBroadcast ? __ldg(target + (base + 4u * v) % period / 4)  // re-read: stays in L2
                              : load4<kStreaming>(target + v);
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

// Where launches without a workspace counter count finished blocks (see the header).
__device__ unsigned int g_blocks_done = 0;

// The last block: partials in float64, 16-byte loads through L2 (__ldcg: the partials were
// written by other SMs, and L1 is not coherent), then a fixed tree. The mean goes to *out.
__device__ void last_block_mean(const float* partials, int64_t count, int64_t n, float* out) {
    const float4* vectors = reinterpret_cast<const float4*>(partials);  // 16-byte aligned
    const int64_t nvec = count / 4;
    double acc = 0.0;
#pragma unroll 8
    for (int64_t v = threadIdx.x; v < nvec; v += kThreads) {
        const float4 p = __ldcg(vectors + v);
        acc += (static_cast<double>(p.x) + p.y) + (static_cast<double>(p.z) + p.w);
    }
    for (int64_t i = 4 * nvec + threadIdx.x; i < count; i += kThreads) acc += __ldcg(partials + i);
    acc = block_sum<kThreads>(acc);  // complete in thread 0 (common/reduce.cuh)
    if (threadIdx.x == 0) *out = static_cast<float>(acc / static_cast<double>(n));
}

template <class Loss, bool kVector, bool kBroadcast, bool kStreaming, bool kWorkspaceCounter>
__global__ void __launch_bounds__(kThreads) tiles_then_last_block(ReductionArgs a, float* partials,
                                                                  int64_t tiles, int64_t tile_elems,
                                                                  unsigned int* workspace_counter) {
    const int lane = threadIdx.x % 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
    for (int64_t tile = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / 32;
         tile < tiles; tile += warps) {
        const int64_t start = tile * tile_elems;
        const int64_t end = start + tile_elems < a.n ? start + tile_elems : a.n;
        const float sum = kVector && end - start == tile_elems
                              ? full_tile_sum<Loss, kBroadcast, kStreaming>(a, start,
                                                                static_cast<int>(tile_elems / kStep), lane)
                              : any_tile_sum<Loss>(a, start, end, lane);
        const float tile_sum = warp_sum(sum);
        if (lane == 0) partials[tile] = tile_sum;
    }
    // Needed even with one block: every thread reads partials that other warps wrote.
    if (gridDim.x > 1) __threadfence();  // this thread's partials reach L2 before the count
    __syncthreads();                     // ... for every thread of the block
    if (gridDim.x > 1) {
        __shared__ bool is_last;
        if (threadIdx.x == 0) {
            unsigned int* counter = kWorkspaceCounter ? workspace_counter : &g_blocks_done;
            is_last = atomicInc(counter, gridDim.x - 1) == gridDim.x - 1;  // wraps to 0 then
        }
        __syncthreads();
        if (!is_last) return;
        __threadfence();  // the other blocks' partials are read after their count
    }
    last_block_mean(partials, tiles, a.n, a.out);
}

// Workspace: the counter in the first 256 bytes (kWorkspaceCounter), then the partials.
constexpr size_t kPartialsOffset = 256;

template <class Loss, bool kVector, bool kBroadcast, bool kStreaming, bool kWorkspaceCounter>
static cudaError_t launch_one(const ReductionArgs* a, int64_t tiles, int64_t tile_elems,
                              cudaStream_t stream) {
    const auto kernel = tiles_then_last_block<Loss, kVector, kBroadcast, kStreaming, kWorkspaceCounter>;
    const int64_t needed = ceil_div(tiles, kThreads / 32);
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once: costs µs
    int64_t blocks = needed < resident ? needed : resident;
    if (grid_cap() > 0 && blocks > grid_cap()) blocks = grid_cap();
    unsigned int* counter = static_cast<unsigned int*>(a->workspace);
    float* partials = reinterpret_cast<float*>(static_cast<char*>(a->workspace) + kPartialsOffset);
    if (kWorkspaceCounter && blocks > 1) {
        const cudaError_t err = cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream);
        if (err != cudaSuccess) return err;
    }
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(*a, partials, tiles, tile_elems, counter);
    return cudaGetLastError();
}

template <class Loss, bool kWorkspaceCounter>
static cudaError_t launch_single_pass(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tile_elems = tile_size(a->n);
    const int64_t tiles = ceil_div(a->n, tile_elems);
    const bool broadcast = a->target_len != a->n;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!broadcast || (a->target_len % 4 == 0 && a->target_len < (1LL << 31)));
    const bool streaming = a->n < kPlainLoadsFrom;
    if (vector && broadcast && streaming)
        return launch_one<Loss, true, true, true, kWorkspaceCounter>(a, tiles, tile_elems, stream);
    if (vector && broadcast)
        return launch_one<Loss, true, true, false, kWorkspaceCounter>(a, tiles, tile_elems, stream);
    if (vector && streaming)
        return launch_one<Loss, true, false, true, kWorkspaceCounter>(a, tiles, tile_elems, stream);
    if (vector)
        return launch_one<Loss, true, false, false, kWorkspaceCounter>(a, tiles, tile_elems, stream);
    return launch_one<Loss, false, false, true, kWorkspaceCounter>(a, tiles, tile_elems, stream);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_single_pass<MseLoss, true>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_single_pass<SmoothL1Loss, true>(a, s);
}
extern "C" cudaError_t hinge_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_single_pass<HingeLoss, true>(a, s);
}
extern "C" cudaError_t mse_global_counter_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_single_pass<MseLoss, false>(a, s);
}
