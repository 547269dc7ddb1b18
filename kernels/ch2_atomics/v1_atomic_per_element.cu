// Chapter 2, version 1: every thread adds its squared error into one float with atomicAdd.
//
// The first version that uses the whole GPU: one thread per element, and the sum is whatever one
// float in global memory holds after n atomic additions. The launcher zeroes that float first
// (the output PyTorch hands us is uninitialised) and divides it by n at the end with a tiny
// kernel, all on the caller's stream: no host round-trip.
// Not deterministic: float addition is not associative and the atomics land in whatever order
// the hardware serves them, so the last bits change from run to run; and every partial sum is
// rounded to float, so the error grows with n: once the sum is large, small squares are rounded
// away (3.7e-3 relative at 4 M elements on an H100; check it with rtol=1e-3 on the shapes up to
// 10^5 elements).
// Still slow: n atomics on one address are served one after another by the L2 cache: about
// 0.6 G elements/s measured on an H100, hundreds of times below what the memory could deliver.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__global__ void squared_error_atomic(ReductionArgs a) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // > 2^31 elements
    if (i >= a.n) return;
    // A target shorter than pred repeats over pred's trailing dimensions (PyTorch broadcasting).
    const float d = a.pred[i] - a.target[a.target_len == a.n ? i : i % a.target_len];
    atomicAdd(a.out, d * d);
}

// Sum to mean in one thread. Dividing in double: n above 2^24 is not exact in float.
__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(ceil_div(a->n, kThreads));
    squared_error_atomic<<<blocks, kThreads, 0, stream>>>(*a);
    divide_by_n<<<1, 1, 0, stream>>>(a->out, a->n);
    return cudaGetLastError();
}
