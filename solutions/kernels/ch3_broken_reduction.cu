// Solution (chapter 3 exercise): the broken reduction.
//
// The loop stopped at s > 1, so it never ran the round s = 1, the one that adds sdata[1] into
// sdata[0]: each block lost the sum of half its values (thread 1's share of the last round).
// With 8 threads: s = 4 leaves sums in sdata[0..3], s = 2 in sdata[0..1], and only s = 1 makes
// sdata[0] the total. The condition is s > 0. The check catches this bug on any input of two or
// more elements because it is deterministic. A missing __syncthreads() is the other classic
// bug, and a check may pass it by luck (the warps happen to run in a harmless order);
// `compute-sanitizer --tool racecheck` finds that one.
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
    for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
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
