// Chapter 3, version 3: sequential addressing (Harris's kernel 3).
//
// Fixes (vs version 2): bank conflicts. Round s adds the upper half of the remaining values onto
// the lower half: thread tid reads sdata[tid] and sdata[tid + s], consecutive threads touch
// consecutive words, every bank once per access. The working threads are still the first ones.
// Still slow: half the threads do nothing but load in the first round, and every round needs a
// __syncthreads() even when one warp is left; one element per thread; n/256 atomics.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) sequential(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid;
    float v = 0.0f;
    if (i < a.n) {
        const float d = a.pred[i] - a.target[i];
        v = d * d;
    }
    sdata[tid] = v;
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
    sequential<<<static_cast<unsigned>(ceil_div(a->n, kThreads)), kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
