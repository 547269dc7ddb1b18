// Chapter 3, version 4: first add during load (Harris's kernel 4).
//
// Fixes (vs version 3): idle threads in the first round. Each thread loads two elements, one
// block apart (both loads coalesced), and adds them before writing to shared memory: half as
// many blocks, each reducing 512 elements, and half as many atomics.
// Still slow: the last six rounds run in one warp yet still pay a __syncthreads() each; two
// 4-byte loads per input per thread is still too little in flight for the full bandwidth.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__device__ __forceinline__ float squared_error(const ReductionArgs& a, int64_t i) {
    if (i >= a.n) return 0.0f;
    const float d = a.pred[i] - a.target[i];
    return d * d;
}

__global__ void __launch_bounds__(kThreads) first_add_during_load(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(2 * kThreads) + tid;
    sdata[tid] = squared_error(a, i) + squared_error(a, i + kThreads);
    __syncthreads();
    for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) add_block_sum(a.workspace, sdata[0]);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    // One target per prediction: Hinge's broadcast row is version 7's step.
    if (a->target_len != a->n) return cudaErrorNotSupported;
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, 2 * kThreads));
    first_add_during_load<<<blocks, kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
