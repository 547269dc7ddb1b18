// Chapter 3, version 10: the block sums go straight into the result: one float atomic each.
//
// Fixes (vs version 9): plumbing the resident grid no longer needs. The 1024 slots
// (common/block_slots.cuh) kept millions of atomics off one address; a few hundred block sums
// queue for a moment at most. So the launcher zeroes the 0-d result, each block adds its sum
// to it with atomicAdd, and one thread divides by n: the slots' memset of 4 KiB and their
// 1024-thread tree go.
// Not deterministic: the block sums still meet through float atomics.
// Still slow: 4-byte loads; a 64-bit % per element for Hinge; three launches (memset, sum,
// divide) cost more than the work at small n (chapter 4 fixes that and the atomics).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

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

template <class Loss>
__global__ void __launch_bounds__(kThreads) grid_stride(ReductionArgs a) {
    const Loss loss;
    const int64_t thread = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    float acc = 0.0f;
    for (int64_t i = thread; i < a.n; i += stride)
        acc += loss(a.pred[i], a.target[a.target_len == a.n ? i : i % a.target_len]);
    const float sum = block_sum(acc);
    if (threadIdx.x == 0) atomicAdd(a.out, sum);
}

__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const auto kernel = grid_stride<Loss>;
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once
    const int64_t needed = ceil_div(a->n, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a);
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
