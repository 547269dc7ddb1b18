// Exercise (chapter 2): warp-aggregated atomics for version 1.
//
// Version 1 of the chapter gives every element its own atomicAdd on one float. Keep its shape,
// one element per thread and no loop, but let the 32 lanes of a warp first add their values
// together with register shuffles, so that only lane 0 issues the atomic: 32 times fewer atomics
// on the contended address.
//
// TODO: as written, lane 0 adds only ITS OWN value and the other 31 lanes' values are lost, so
// the check fails. Add the warp's 32 values together before the atomic (__shfl_down_sync).
// Careful: __shfl_down_sync(0xffffffff, ...) needs all 32 lanes to reach it, and the last warp
// of the grid has lanes past the end of the input.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) squared_error_warp_atomic(ReductionArgs a, float* total) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= a.n) return;
    const MseLoss loss;
    float v = loss(a.pred[i], a.target[i % a.target_len]);  // % target_len: a broadcast target

    // TODO: make lane 0's `v` the sum of all 32 lanes of its warp here.

    if (threadIdx.x % 32 == 0) atomicAdd(total, v);
}

__global__ void divide_by_n(const float* total, int64_t n, float* out) {
    *out = static_cast<float>(static_cast<double>(*total) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    float* total = static_cast<float*>(a->workspace);  // uninitialised: zero it first
    cudaError_t err = cudaMemsetAsync(total, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, kThreads));
    squared_error_warp_atomic<<<blocks, kThreads, 0, stream>>>(*a, total);
    divide_by_n<<<1, 1, 0, stream>>>(total, a->n, a->out);
    return cudaGetLastError();
}
