// Chapter 3, version 8: the block's sum by warps first: shuffles, then one warp over the warps.
//
// Fixes (vs version 7): the tree in shared memory. Each warp adds its 32 values with five
// butterfly shuffles (__shfl_xor_sync, chapter 2), lane 0 writes the warp's sum to warp_sums,
// and after ONE __syncthreads() the first warp adds the 8 warp sums the same way. Version 7
// wrote 256 values to shared memory and passed three barriers before its last warp.
// Still slow: one block per 512 elements (millions of blocks at large n, each paying for its
// sum and its atomic), 4-byte loads, n/512 atomics, a 64-bit % per element for Hinge.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;

template <class Loss>
__device__ __forceinline__ float element_loss(const ReductionArgs& a, int64_t i) {
    if (i >= a.n) return 0.0f;
    const Loss loss;
    return loss(a.pred[i], a.target[a.target_len == a.n ? i : i % a.target_len]);
}

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
__global__ void __launch_bounds__(kThreads) warps_first(ReductionArgs a) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(2 * kThreads) + threadIdx.x;
    const float sum = block_sum(element_loss<Loss>(a, i) + element_loss<Loss>(a, i + kThreads));
    if (threadIdx.x == 0) add_block_sum(a.workspace, sum);
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, 2 * kThreads));
    warps_first<Loss><<<blocks, kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
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
