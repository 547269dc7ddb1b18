// Chapter 4, version 1: two passes, one partial per block; no atomics.
//
// Fixes (vs chapter 3, version 6): the float atomics. Pass 1 is chapter 3's vectorized
// grid-stride kernel, but each block writes its sum to its own slot of a workspace array
// instead of adding it into one float; pass 2 is one block that adds those partials in float64
// in a fixed order, divides by n and writes the 0-d result. No memset, no divide kernel: still
// two launches, one fewer than before, and nothing is added in an order the hardware chooses,
// so two runs with the same grid give the same bits.
// Still not reproducible everywhere: the grid is the number of blocks that fit on the GPU, so a
// GPU with a different SM count (or a different block size) splits the elements differently
// among threads and rounds differently: the last bits change with the launch configuration
// (version 2 fixes this with tiles that depend on n alone). Two launches at small sizes.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "reduce.cuh"

constexpr int kThreads = 256;
constexpr int kUnroll = 4;           // float4 loads per input in flight per thread
constexpr int kFinalThreads = 1024;  // pass 2: one block
constexpr int64_t kMaxBlocks = 8192; // partials: 32 KiB, well inside the workspace

struct WrappedIndex {  // target index of a pred index advancing by a fixed stride
    uint64_t at, step, len;
    __device__ WrappedIndex(uint64_t start, uint64_t stride, uint64_t length)
        : at(start % length), step(stride % length), len(length) {}
    __device__ __forceinline__ void advance() {
        at += step;
        if (at >= len) at -= len;
    }
};

// As chapter 3 version 6, but the block's sum goes to partials[blockIdx.x].
template <class Loss, bool kVector, bool kBroadcast>
__global__ void __launch_bounds__(kThreads) block_partials(ReductionArgs a, int64_t head,
                                                           int64_t vectors, float* partials) {
    const Loss loss;
    const int64_t thread = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    float acc = 0.0f;
    if (kVector) {
        const float4* pred = reinterpret_cast<const float4*>(a.pred + head);
        const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : head));
        WrappedIndex t_at(kBroadcast ? 4 * thread : 0, kBroadcast ? 4 * stride : 0,
                          kBroadcast ? a.target_len : 1);
        int64_t v = thread;
        for (; v + (kUnroll - 1) * stride < vectors; v += kUnroll * stride) {
            float4 p[kUnroll], t[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                p[u] = __ldcs(pred + v + u * stride);
                if (kBroadcast) {
                    t[u] = __ldg(target + t_at.at / 4);
                    t_at.advance();
                } else {
                    t[u] = __ldcs(target + v + u * stride);
                }
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                acc += (loss(p[u].x, t[u].x) + loss(p[u].y, t[u].y)) +
                       (loss(p[u].z, t[u].z) + loss(p[u].w, t[u].w));
        }
        for (; v < vectors; v += stride) {
            const float4 p = __ldcs(pred + v);
            float4 t;
            if (kBroadcast) {
                t = __ldg(target + t_at.at / 4);
                t_at.advance();
            } else {
                t = __ldcs(target + v);
            }
            acc += (loss(p.x, t.x) + loss(p.y, t.y)) + (loss(p.z, t.z) + loss(p.w, t.w));
        }
    }
    const int64_t tail = head + 4 * vectors;
    for (int64_t i = thread; i < head; i += stride) acc += loss(a.pred[i], a.target[i]);
    WrappedIndex s_at(tail + thread, stride, a.target_len);
    for (int64_t i = tail + thread; i < a.n; i += stride) {
        acc += loss(a.pred[i], a.target[s_at.at]);
        s_at.advance();
    }
    const float sum = block_sum<kThreads>(acc);  // common/reduce.cuh
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2: the partials in float64, in an order fixed by the thread index; then the mean.
__global__ void __launch_bounds__(kFinalThreads) finish_mean(const float* partials, int64_t count,
                                                             int64_t n, float* out) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += kFinalThreads) acc += partials[i];
    acc = block_sum<kFinalThreads>(acc);  // complete in thread 0 (common/reduce.cuh)
    if (threadIdx.x == 0) *out = static_cast<float>(acc / static_cast<double>(n));
}

template <class Loss, bool kVector, bool kBroadcast>
static void launch_sum(const ReductionArgs* a, int64_t head, int64_t vectors, cudaStream_t stream) {
    const auto kernel = block_partials<Loss, kVector, kBroadcast>;
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once
    const int64_t work = kVector ? vectors : a->n;
    int64_t blocks = ceil_div(work > 0 ? work : 1, kThreads * kUnroll);
    if (blocks > resident) blocks = resident;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    float* partials = static_cast<float*>(a->workspace);
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(*a, head, vectors, partials);
    finish_mean<<<1, kFinalThreads, 0, stream>>>(partials, blocks, a->n, a->out);
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    const uintptr_t p_off = reinterpret_cast<uintptr_t>(a->pred) & 15;
    const uintptr_t t_off = reinterpret_cast<uintptr_t>(a->target) & 15;
    if (a->target_len == a->n && p_off == t_off) {
        int64_t head = static_cast<int64_t>((16 - p_off) % 16 / 4);
        if (head > a->n) head = a->n;
        launch_sum<Loss, true, false>(a, head, (a->n - head) / 4, stream);
    } else if (a->target_len != a->n && p_off == 0 && t_off == 0 && a->target_len % 4 == 0) {
        launch_sum<Loss, true, true>(a, 0, a->n / 4, stream);
    } else {
        launch_sum<Loss, false, false>(a, 0, 0, stream);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch<MseLoss>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch<SmoothL1Loss>(a, s);
}
extern "C" cudaError_t hinge_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch<HingeLoss>(a, s);
}
