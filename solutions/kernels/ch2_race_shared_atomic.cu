// Solution (chapter 2 exercise), the smallest fix: the race was `block_sum += sum`.
//
// Each thread adds its sum with a shared-memory atomic, atomicAdd(&block_sum, sum): correct, but
// the 256 threads of a block take turns on one word. solutions/kernels/ch2_race.cu is the faster
// fix (a warp's 32 sums added with shuffles first: 8 shared atomics per block); the solutions
// notebook times the two.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) mse_block_total(ReductionArgs a, float* total) {
    __shared__ float block_sum;
    if (threadIdx.x == 0) block_sum = 0.0f;
    __syncthreads();

    const MseLoss loss;
    float sum = 0.0f;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
         i += stride)
        sum += loss(a.pred[i], a.target[i % a.target_len]);  // % target_len: a broadcast target

    atomicAdd(&block_sum, sum);  // was: block_sum += sum (a race)
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(total, block_sum);
}

__global__ void divide_by_n(const float* total, int64_t n, float* out) {
    *out = static_cast<float>(static_cast<double>(*total) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    float* total = static_cast<float*>(a->workspace);  // uninitialised: zero it first
    cudaError_t err = cudaMemsetAsync(total, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const int64_t needed = ceil_div(a->n, kThreads);
    static const int64_t resident = resident_blocks(mse_block_total, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    mse_block_total<<<blocks, kThreads, 0, stream>>>(*a, total);
    divide_by_n<<<1, 1, 0, stream>>>(total, a->n, a->out);
    return cudaGetLastError();
}
