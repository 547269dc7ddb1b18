// Chapter 3, version 14: an unaligned view peels its first 1-3 elements, then reads float4.
//
// Fixes (vs version 13): 4-byte loads for views such as x[1:], which start 4, 8 or 12 bytes past
// a 16-byte boundary. When pred and target are misaligned alike (the usual case: two views cut
// the same way), the first (16 - offset) / 4 elements, the head, are done one at a time; from
// there both pointers are 16-byte aligned and the float4 loop runs as before.
// Still 4-byte loads: a broadcast target (Hinge's row), and pred and target misaligned unlike.
// Not deterministic: the block sums still meet through float atomics.
// Still slow: three launches (memset, sum, divide) cost more than the work at small n (chapter 4
// fixes that and the atomics).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "wrapped_index.cuh"

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // float4 loads per input per loop iteration (version 13 says why)

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[kThreads / 32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;  // complete in thread 0
}

// Elements [head, head + 4 * vectors) are read as float4; the rest, [0, head) and the tail, one at
// a time. kVector == false: head = vectors = 0, all elements one at a time.
template <class Loss, bool kVector>
__global__ void __launch_bounds__(kThreads) vector_grid_stride(ReductionArgs a, int64_t head,
                                                               int64_t vectors) {
    const Loss loss;
    const int64_t thread = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    float acc = 0.0f;
    if (kVector) {
        const float4* pred = reinterpret_cast<const float4*>(a.pred + head);
        const float4* target = reinterpret_cast<const float4*>(a.target + head);
        int64_t v = thread;
        for (; v + (kUnroll - 1) * stride < vectors; v += kUnroll * stride) {
            float4 p[kUnroll], t[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                p[u] = __ldcs(pred + v + u * stride);  // read once: do not keep in cache
                t[u] = __ldcs(target + v + u * stride);
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                acc += (loss(p[u].x, t[u].x) + loss(p[u].y, t[u].y)) +
                       (loss(p[u].z, t[u].z) + loss(p[u].w, t[u].w));
        }
        for (; v < vectors; v += stride) {
            const float4 p = __ldcs(pred + v);
            const float4 t = __ldcs(target + v);
            acc += (loss(p.x, t.x) + loss(p.y, t.y)) + (loss(p.z, t.z) + loss(p.w, t.w));
        }
    }
    // Scalar part: [0, head) and [head + 4 * vectors, n), at most 6 elements when kVector.
    const int64_t tail = head + 4 * vectors;
    for (int64_t i = thread; i < head; i += stride)  // head > 0 only when target_len == n
        acc += loss(a.pred[i], a.target[i]);
    WrappedIndex s_at(tail + thread, stride, a.target_len);
    for (int64_t i = tail + thread; i < a.n; i += stride) {
        acc += loss(a.pred[i], a.target[s_at.at]);
        s_at.advance();
    }
    const float sum = block_sum(acc);
    if (threadIdx.x == 0) atomicAdd(a.out, sum);
}

__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

template <class Loss, bool kVector>
static void launch_sum(const ReductionArgs* a, int64_t head, int64_t vectors, cudaStream_t stream) {
    const auto kernel = vector_grid_stride<Loss, kVector>;
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once
    const int64_t work = kVector ? vectors : a->n;
    const int64_t needed = ceil_div(work > 0 ? work : 1, kThreads * kUnroll);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a, head, vectors);
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const uintptr_t p_off = reinterpret_cast<uintptr_t>(a->pred) & 15;
    const uintptr_t t_off = reinterpret_cast<uintptr_t>(a->target) & 15;
    if (a->target_len == a->n && p_off == t_off) {
        // Misaligned alike (or both aligned): peel up to 3 elements, then vectors.
        int64_t head = static_cast<int64_t>((16 - p_off) % 16 / 4);
        if (head > a->n) head = a->n;
        launch_sum<Loss, true>(a, head, (a->n - head) / 4, stream);
    } else {
        launch_sum<Loss, false>(a, 0, 0, stream);
    }
    divide_by_n<<<1, 1, 0, stream>>>(a->out, a->n);
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
