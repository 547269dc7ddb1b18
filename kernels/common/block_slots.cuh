// How chapter 3's tree kernels combine their block sums, before chapter 4 removes atomics.
//
// With one block per 256 (or 512) elements there are millions of block sums. Added with
// atomicAdd into a single float, they all queue on one address (chapter 2's contention) and
// that queue, not the tree, sets the time: every version of the ladder would measure the same.
// So block b adds its sum into slot b % kSlots of the workspace, and one small kernel adds the
// slots and divides by n. Still float atomics: the last bits change from run to run.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int kSlots = 1024;

static inline cudaError_t clear_slots(void* workspace, cudaStream_t stream) {
    return cudaMemsetAsync(workspace, 0, kSlots * sizeof(float), stream);
}

__device__ __forceinline__ void add_block_sum(void* workspace, float block_sum) {
    atomicAdd(static_cast<float*>(workspace) + blockIdx.x % kSlots, block_sum);
}

// One block of kSlots threads: a tree over the slots, then the mean.
__global__ void __launch_bounds__(kSlots) slots_mean(const void* workspace, int64_t n, float* out) {
    __shared__ float sums[kSlots];
    sums[threadIdx.x] = static_cast<const float*>(workspace)[threadIdx.x];
    __syncthreads();
    for (int s = kSlots / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = static_cast<float>(static_cast<double>(sums[0]) / static_cast<double>(n));
}
