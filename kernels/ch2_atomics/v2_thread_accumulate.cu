// Chapter 2, version 2: each thread sums many elements in a register, then adds once.
//
// Fixes (vs version 1): n atomics on one address become one per thread. A grid-stride loop with
// only as many threads as fit on the GPU at once (a few hundred thousand on an H100) gives every
// thread a long run of elements to add into a private float, so the serialised atomics fall from
// n to the number of threads. Thread i reads elements i, i + stride, ...: a warp's 32 loads are
// still 32 consecutive floats, one 128-byte transaction.
// Not deterministic: the per-thread sums still meet in one float through atomics in an order the
// hardware chooses.
// Still slow: a few hundred thousand atomics on one address still queue at the L2 (about half a
// millisecond on an H100, whatever n);
// at small n the three launches (memset, sum, divide) cost more than the work.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) thread_accumulate(ReductionArgs a) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const bool broadcast = a.target_len != a.n;
    float acc = 0.0f;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
         i += stride) {
        const float d = a.pred[i] - a.target[broadcast ? i % a.target_len : i];
        acc += d * d;
    }
    atomicAdd(a.out, acc);
}

__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    static const int64_t resident = resident_blocks(thread_accumulate, kThreads);  // asked once
    const int64_t needed = ceil_div(a->n, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    thread_accumulate<<<blocks, kThreads, 0, stream>>>(*a);
    divide_by_n<<<1, 1, 0, stream>>>(a->out, a->n);
    return cudaGetLastError();
}
