// Exercise (chapter 3): find and fix the broken reduction.
//
// This is version 3 of the chapter (sequential addressing), retyped from memory, and the check
// fails on every input of more than one element. The loads, the bounds and the launch are
// right; the bug is in the tree. Find it by reasoning about what sdata[0] holds at the end (try
// it by hand with 8 threads), fix it, and run the check again.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "losses.cuh"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) sequential_tree(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const MseLoss loss;
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid;
    sdata[tid] = i < a.n ? loss(a.pred[i], a.target[i % a.target_len]) : 0.0f;
    __syncthreads();
    for (unsigned s = kThreads / 2; s > 1; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(a.out, sdata[0]);
}

__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, kThreads));
    sequential_tree<<<blocks, kThreads, 0, stream>>>(*a);
    divide_by_n<<<1, 1, 0, stream>>>(a->out, a->n);
    return cudaGetLastError();
}
