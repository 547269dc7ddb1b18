// Chapter 3, version 5: the last 32 values are added with warp shuffles (Harris's kernel 5,
// written the modern way).
//
// Fixes (vs version 4): the six rounds that run inside one warp. Harris unrolled them with
// volatile shared memory and no barrier ("warp-synchronous"), which is no longer safe since
// Volta's independent thread scheduling; __shfl_down_sync passes registers inside a warp with
// the synchronisation built in, and needs no shared memory at all.
// Still slow: the grid has one block per 512 elements (millions at large n: block launch and
// tree overhead per 2 KiB read), loads are 4 bytes wide, n/512 atomics (chapter 3 version 6
// fixes the loads and the grid, chapter 4 the atomics).
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

__global__ void __launch_bounds__(kThreads) warp_shuffle_tail(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(2 * kThreads) + tid;
    sdata[tid] = squared_error(a, i) + squared_error(a, i + kThreads);
    __syncthreads();
    for (unsigned s = kThreads / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) {  // the whole first warp: __shfl_down_sync needs every lane of the mask
        float v = sdata[tid] + sdata[tid + 32];
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (tid == 0) add_block_sum(a.workspace, v);
    }
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    // One target per prediction: Hinge's broadcast row is version 7's step.
    if (a->target_len != a->n) return cudaErrorNotSupported;
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, 2 * kThreads));
    warp_shuffle_tail<<<blocks, kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
