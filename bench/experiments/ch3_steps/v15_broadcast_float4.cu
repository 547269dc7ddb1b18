// Chapter 3, version 15: a broadcast target read as float4 too (the chapter's final kernel).
//
// Fixes (vs version 14): Hinge's 4-byte loads. When the target row is 16-byte aligned and its
// length a multiple of 4, a float4 of pred (elements 4v..4v+3) never straddles the row's end, so
// its four targets are one float4 at (4v mod target_len) / 4: WrappedIndex, stepped by 4 * stride,
// finds it. Those loads go through the read-only cache (__ldg): the row is small and read again
// by every thread, unlike pred, which is read once (__ldcs). Other rows keep 4-byte loads.
// This file does what chapter 3's v6_vectorized_grid_stride.cu does (the same kernel, grid and
// loads); only WrappedIndex moved to common/wrapped_index.cuh.
// Not deterministic: the block sums still meet through float atomics.
// Still slow: three launches (memset, sum, divide) cost more than the work at small n; the
// atomic order changes the last bits from run to run (chapter 4 fixes both).
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
template <class Loss, bool kVector, bool kBroadcast>
__global__ void __launch_bounds__(kThreads) vector_grid_stride(ReductionArgs a, int64_t head,
                                                               int64_t vectors) {
    const Loss loss;
    const int64_t thread = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    float acc = 0.0f;
    if (kVector) {
        const float4* pred = reinterpret_cast<const float4*>(a.pred + head);
        const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : head));
        // kBroadcast: head == 0 and target_len % 4 == 0, so a float4 of pred never straddles the
        // end of the target: its four targets are one float4 too.
        WrappedIndex t_at(kBroadcast ? 4 * thread : 0, kBroadcast ? 4 * stride : 0,
                          kBroadcast ? a.target_len : 1);
        int64_t v = thread;
        for (; v + (kUnroll - 1) * stride < vectors; v += kUnroll * stride) {
            float4 p[kUnroll], t[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                p[u] = __ldcs(pred + v + u * stride);  // read once: do not keep in cache
                if (kBroadcast) {
                    t[u] = __ldg(target + t_at.at / 4);  // re-read: small, stays in L2
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

template <class Loss, bool kVector, bool kBroadcast>
static void launch_sum(const ReductionArgs* a, int64_t head, int64_t vectors, cudaStream_t stream) {
    const auto kernel = vector_grid_stride<Loss, kVector, kBroadcast>;
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
        launch_sum<Loss, true, false>(a, head, (a->n - head) / 4, stream);
    } else if (a->target_len != a->n && p_off == 0 && t_off == 0 && a->target_len % 4 == 0) {
        launch_sum<Loss, true, true>(a, 0, a->n / 4, stream);
    } else {
        launch_sum<Loss, false, false>(a, 0, 0, stream);
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
