// Solution (chapter 4 exercise): a compensated (Kahan) final pass.
//
// Pass 2 still adds the partials one by one in float, but carries the rounding error of each
// addition in `c`: t = sum + y rounds; (t - sum) - y recovers, exactly, what the rounding added,
// and the next addend is corrected by it. The error of the whole sum no longer grows with the
// number of partials: it stays about one float rounding (6e-8 relative), as good as accumulating
// in float64. nvcc does not reassociate float arithmetic (no --use_fast_math), which would cancel
// the compensation to zero.
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

// Pass 2: one thread, the partials in order, in float, compensated.
__global__ void sequential_mean(const float* partials, int64_t count, int64_t n, float* out) {
    float sum = 0.0f;
    float c = 0.0f;  // what the roundings so far have added too much (the next addend subtracts it)
    for (int64_t k = 0; k < count; ++k) {
        const float y = partials[k] - c;
        const float t = sum + y;
        c = (t - sum) - y;
        sum = t;
    }
    *out = static_cast<float>((static_cast<double>(sum) - c) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    const int64_t tiles = ceil_div(a->n, kTile);
    float* partials = static_cast<float*>(a->workspace);
    tile_partials<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(*a, partials);
    sequential_mean<<<1, 1, 0, stream>>>(partials, tiles, a->n, a->out);
    return cudaGetLastError();
}
