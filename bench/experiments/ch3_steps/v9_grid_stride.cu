// Chapter 3, version 9: a grid sized to the GPU, each thread walking the input (grid-stride).
//
// Fixes (vs version 8): millions of blocks. The grid is the blocks that fit on the GPU at once
// (resident_blocks, common/cuda_utils.cuh: the runtime's blocks per SM times the SMs), fewer
// when n is small; each thread adds elements thread, thread + stride, thread + 2 * stride, ...,
// stride = the grid's threads, in a register. Every block then pays for one sum and one atomic,
// a few hundred in all instead of n/512. The loads are still coalesced: in each pass the
// consecutive threads of the grid read consecutive elements.
// Still slow: 4-byte loads; a 64-bit % per element for Hinge; the atomics still spread over
// 1024 slots, which only millions of block sums needed.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
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
    if (threadIdx.x == 0) add_block_sum(a.workspace, sum);
}

template <class Loss>
static cudaError_t launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    const auto kernel = grid_stride<Loss>;
    static const int64_t resident = resident_blocks(kernel, kThreads);  // asked once
    const int64_t needed = ceil_div(a->n, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    kernel<<<blocks, kThreads, 0, stream>>>(*a);
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
