// Chapter 2, version 3: the 32 threads of a warp add their sums with shuffles, one atomic per warp.
//
// Fixes (vs version 2): 32 times fewer atomics. __shfl_down_sync passes a register from one lane
// to another without memory: five steps (offsets 16, 8, 4, 2, 1) leave the warp's sum in lane 0,
// which alone calls atomicAdd.
// Not deterministic: the warp sums still meet through float atomics in hardware order.
// Still slow: one atomic per warp is thousands of atomics on one address; the loads are 4 bytes
// wide and one per input at a time per thread: 8 bytes in flight per thread, a few too few to
// cover the memory latency (Nsight Compute in chapter 2: DRAM at 88% of its peak at 2^28, where
// chapter 3's 16-byte loads reach 93%).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // complete in lane 0 only
}

__global__ void __launch_bounds__(kThreads) warp_atomics(ReductionArgs a) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const bool broadcast = a.target_len != a.n;
    float acc = 0.0f;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
         i += stride) {
        const float d = a.pred[i] - a.target[broadcast ? i % a.target_len : i];
        acc += d * d;
    }
    acc = warp_sum(acc);  // every lane must take part: no early return above
    if (threadIdx.x % 32 == 0) atomicAdd(a.out, acc);
}

__global__ void divide_by_n(float* out, int64_t n) {
    *out = static_cast<float>(static_cast<double>(*out) / static_cast<double>(n));
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(a->out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    static const int64_t resident = resident_blocks(warp_atomics, kThreads);  // asked once
    const int64_t needed = ceil_div(a->n, kThreads);
    const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
    warp_atomics<<<blocks, kThreads, 0, stream>>>(*a);
    divide_by_n<<<1, 1, 0, stream>>>(a->out, a->n);
    return cudaGetLastError();
}
