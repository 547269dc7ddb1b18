// Exercise (chapter 4): a compensated final pass.
//
// Pass 1 writes one float partial per 1024 elements. Pass 2 is ONE thread that adds the partials
// in order in a float: at 2^26 elements that is 65536 additions into an accumulator that grows
// to about 10^8, where one float step (ulp) is 8 or 16, so every addition rounds away a few
// units and the roundings pile up. (One thread is slow; here it only serves the lesson.)
//
// TODO(exercise 4.1): keep the float accumulator but make pass 2 compensated (Kahan summation).
// The strict check (rtol 2e-7 at 2^26 elements) fails until you do; the default check passes
// already.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;
constexpr int kTile = 4 * kThreads;  // elements per partial: 1024 (the workspace holds n / 1024 + 1)

template <class T>
__device__ __forceinline__ T block_sum(T v) {  // complete in thread 0; every thread must call it
    __shared__ T warp_sums[kThreads / 32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : T(0);
    if (threadIdx.x < 32)
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Block b sums elements [1024 b, 1024 (b + 1)): 4 per thread, each load coalesced.
__device__ __forceinline__ float tile_sum(const ReductionArgs& a) {
    const MseLoss loss;
    const int64_t first = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int64_t i = first + k * kThreads;
        if (i < a.n) acc += loss(a.pred[i], a.target[i % a.target_len]);
    }
    return block_sum(acc);
}

__global__ void __launch_bounds__(kThreads) tile_partials(ReductionArgs a, float* partials) {
    const float sum = tile_sum(a);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2: one thread, the partials in order, in float.
__global__ void sequential_mean(const float* partials, int64_t count, int64_t n, float* out) {
    float sum = 0.0f;
    // TODO: compensate each addition (Kahan).
    for (int64_t k = 0; k < count; ++k) sum += partials[k];
    *out = static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tiles = ceil_div(a->n, kTile);
    float* partials = static_cast<float*>(a->workspace);
    tile_partials<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(*a, partials);
    sequential_mean<<<1, 1, 0, stream>>>(partials, tiles, a->n, a->out);
    return cudaGetLastError();
}
