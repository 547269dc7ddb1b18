// Chapter 4, version 4: version 2 with compensated (Kahan) sums in every lane, for the accuracy
// study; plus two deliberately less careful variants to compare with.
//
// What it changes (vs version 2): each lane adds its elements with Kahan's compensated
// summation (the rounding error of every addition is kept in a second float and fed back
// into the next one), so a lane's sum over a tile is as good as one in float64; the tile
// partials are then added in float64 as in version 2. The course's accuracy study runs, on the
// same 2^30 inputs and against float64:
//   mse               Kahan lanes, float64 pass 2 (this version; also smooth_l1, hinge)
//   mse_float_tree    version 2's tiles with plain float lanes, and pass 2 in float32 too
//   mse_sequential    no tiles: every lane adds its whole grid-stride share sequentially in
//                     one float (thousands of values), one partial per warp, pass 2 in float32
// (version 2 itself is "float32 lanes, float64 pass 2").
// Still slow: nothing at large sizes (4 more float operations per element, far below what the
// GPU can do while it waits for memory); two launches at small sizes, as version 2.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "reduce.cuh"

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kStep = 32 * 4 * kUnroll;    // 512
constexpr int64_t kMaxTile = 16 * kStep;   // 8192
constexpr int64_t kWantedTiles = 8192;
constexpr int kFinalThreads = 1024;

enum Mode { KAHAN = 0, FLOAT_TREE = 1, SEQUENTIAL = 2 };

static int64_t tile_size(int64_t n) {  // as version 2: a function of n only
    int64_t tile = kStep;
    while (tile < kMaxTile && ceil_div(n, tile) > kWantedTiles) tile *= 2;
    return tile;
}

struct PlainSum {
    float s = 0.0f;
    __device__ __forceinline__ void add(float x) { s += x; }
    __device__ __forceinline__ float value() const { return s; }
};

// nvcc never reassociates float additions, not even with --use_fast_math (it flushes denormals
// and approximates division, sqrt and exp; chapter 4 compiles this file both ways and counts the
// adds), so the compensation survives.
struct KahanSum {
    float s = 0.0f, c = 0.0f;  // c: minus the low-order part lost by the last addition
    __device__ __forceinline__ void add(float x) {
        const float y = x - c;
        const float t = s + y;
        c = (t - s) - y;
        s = t;
    }
    __device__ __forceinline__ float value() const { return s - c; }
};

template <int kMode> struct SumFor { using type = PlainSum; };
template <> struct SumFor<KAHAN> { using type = KahanSum; };

template <class Loss, bool kBroadcast, class Sum>
__device__ void full_tile_sum(const ReductionArgs& a, int64_t start, int steps, int lane, Sum& acc) {
    const Loss loss;
    const float4* pred = reinterpret_cast<const float4*>(a.pred + start);
    const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : start));
    const uint32_t period = static_cast<uint32_t>(a.target_len);
    const uint32_t base = kBroadcast ? static_cast<uint32_t>(start % a.target_len) : 0;
    for (int step = 0; step < steps; ++step) {
        float4 p[kUnroll], t[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int v = (step * kUnroll + u) * 32 + lane;
            p[u] = __ldcs(pred + v);
            t[u] = kBroadcast ? __ldg(target + (base + 4u * v) % period / 4) : __ldcs(target + v);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            acc.add(loss(p[u].x, t[u].x));
            acc.add(loss(p[u].y, t[u].y));
            acc.add(loss(p[u].z, t[u].z));
            acc.add(loss(p[u].w, t[u].w));
        }
    }
}

template <class Loss, class Sum>
__device__ void any_tile_sum(const ReductionArgs& a, int64_t start, int64_t end, int lane, Sum& acc) {
    const Loss loss;
    const bool broadcast = a.target_len != a.n;
    for (int64_t i = start + lane; i < end; i += 32)
        acc.add(loss(a.pred[i], a.target[broadcast ? i % a.target_len : i]));
}

// KAHAN and FLOAT_TREE: one partial per tile, as version 2. SEQUENTIAL: the lane's sum runs on
// over all the tiles of the warp, one partial per warp.
template <class Loss, bool kVector, bool kBroadcast, int kMode>
__global__ void __launch_bounds__(kThreads) tile_partials(ReductionArgs a, float* partials,
                                                          int64_t tiles, int64_t tile_elems) {
    using Sum = typename SumFor<kMode>::type;
    const int lane = threadIdx.x % 32;
    const int64_t warp = (blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x) / 32;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
    Sum carried;
    for (int64_t tile = warp; tile < tiles; tile += warps) {
        const int64_t start = tile * tile_elems;
        const int64_t end = start + tile_elems < a.n ? start + tile_elems : a.n;
        Sum fresh;
        Sum& acc = kMode == SEQUENTIAL ? carried : fresh;
        if (kVector && end - start == tile_elems)
            full_tile_sum<Loss, kBroadcast>(a, start, static_cast<int>(tile_elems / kStep), lane, acc);
        else
            any_tile_sum<Loss>(a, start, end, lane, acc);
        if (kMode != SEQUENTIAL) {
            const float tile_sum = warp_sum(acc.value());
            if (lane == 0) partials[tile] = tile_sum;
        }
    }
    if (kMode == SEQUENTIAL) {
        const float warp_total = warp_sum(carried.value());
        if (lane == 0) partials[warp] = warp_total;
    }
}

template <class Acc>
__global__ void __launch_bounds__(kFinalThreads) finish_mean(const float* partials, int64_t count,
                                                             int64_t n, float* out) {
    Acc acc = 0;
    for (int64_t i = threadIdx.x; i < count; i += kFinalThreads) acc += static_cast<Acc>(partials[i]);
    acc = block_sum<kFinalThreads>(acc);  // complete in thread 0 (common/reduce.cuh)
    if (threadIdx.x == 0) *out = static_cast<float>(static_cast<double>(acc) / static_cast<double>(n));
}

template <class Loss, bool kVector, bool kBroadcast, int kMode>
static void launch_partials(const ReductionArgs* a, float* partials, int64_t tiles,
                            int64_t tile_elems, cudaStream_t stream) {
    const auto kernel = tile_partials<Loss, kVector, kBroadcast, kMode>;
    const int64_t needed = ceil_div(tiles, kThreads / 32);
    static const int64_t resident = resident_blocks(kernel, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a, partials, tiles, tile_elems);
    const int64_t count = kMode == SEQUENTIAL ? static_cast<int64_t>(blocks) * (kThreads / 32) : tiles;
    if (kMode == KAHAN)
        finish_mean<double><<<1, kFinalThreads, 0, stream>>>(partials, count, a->n, a->out);
    else
        finish_mean<float><<<1, kFinalThreads, 0, stream>>>(partials, count, a->n, a->out);
}

template <class Loss, int kMode>
static cudaError_t launch_two_pass(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tile_elems = tile_size(a->n);
    const int64_t tiles = ceil_div(a->n, tile_elems);
    float* partials = static_cast<float*>(a->workspace);
    const bool broadcast = a->target_len != a->n;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!broadcast || (a->target_len % 4 == 0 && a->target_len < (1LL << 31)));
    if (vector && broadcast)
        launch_partials<Loss, true, true, kMode>(a, partials, tiles, tile_elems, stream);
    else if (vector)
        launch_partials<Loss, true, false, kMode>(a, partials, tiles, tile_elems, stream);
    else
        launch_partials<Loss, false, false, kMode>(a, partials, tiles, tile_elems, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<MseLoss, KAHAN>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<SmoothL1Loss, KAHAN>(a, s);
}
extern "C" cudaError_t hinge_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<HingeLoss, KAHAN>(a, s);
}
extern "C" cudaError_t mse_float_tree_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<MseLoss, FLOAT_TREE>(a, s);
}
extern "C" cudaError_t mse_sequential_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<MseLoss, SEQUENTIAL>(a, s);
}
