// Chapter 3, version 12: 16-byte loads: pred and target read as float4 vectors.
//
// Fixes (vs version 11): 4-byte loads. reinterpret_cast<const float4*> reads four floats with
// one 16-byte instruction instead of four: a quarter of the load instructions for the same
// bytes. __ldcs marks the data as read once (evict first: do not keep it in cache). A float4
// load needs an address that is a multiple of 16, so the vectors run only when both pointers
// are 16-byte aligned and the target has pred's length; the last n % 4 elements, and every
// other input, take the 4-byte loop of version 11.
// Not deterministic: the block sums still meet through float atomics.
// Still slow: each float4 is used as soon as it arrives, one load per input in flight per
// thread; three launches (memset, sum, divide) cost more than the work at small n.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "wrapped_index.cuh"

constexpr int kThreads = 256;

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

// Elements [0, 4 * vectors) are read as float4; the tail, one at a time. kVector == false:
// vectors = 0, all elements one at a time.
template <class Loss, bool kVector>
__global__ void __launch_bounds__(kThreads) vector_grid_stride(ReductionArgs a, int64_t vectors) {
    const Loss loss;
    const int64_t thread = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    float acc = 0.0f;
    if (kVector) {
        const float4* pred = reinterpret_cast<const float4*>(a.pred);
        const float4* target = reinterpret_cast<const float4*>(a.target);
        for (int64_t v = thread; v < vectors; v += stride) {
            const float4 p = __ldcs(pred + v);  // read once: do not keep in cache
            const float4 t = __ldcs(target + v);
            acc += (loss(p.x, t.x) + loss(p.y, t.y)) + (loss(p.z, t.z) + loss(p.w, t.w));
        }
    }
    // Scalar part: [4 * vectors, n), at most 3 elements when kVector.
    const int64_t tail = 4 * vectors;
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
static void launch_sum(const ReductionArgs* a, int64_t vectors, cudaStream_t stream) {
    const auto kernel = vector_grid_stride<Loss, kVector>;
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once
    const int64_t work = kVector ? vectors : a->n;
    const int64_t needed = ceil_div(work > 0 ? work : 1, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a, vectors);
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const uintptr_t p_off = reinterpret_cast<uintptr_t>(a->pred) & 15;
    const uintptr_t t_off = reinterpret_cast<uintptr_t>(a->target) & 15;
    if (a->target_len == a->n && p_off == 0 && t_off == 0) {
        launch_sum<Loss, true>(a, a->n / 4, stream);
    } else {
        launch_sum<Loss, false>(a, 0, stream);
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
