// Chapter 3, version 2: interleaved addressing with a strided index (Harris's kernel 2).
//
// Fixes (vs version 1): divergence. Thread tid works on index 2*s*tid, so the working threads of
// a round are the first ones, packed into as few warps as possible; the other warps skip the
// round entirely. No % either.
// Still slow: shared-memory bank conflicts. In round s the threads of a warp touch words 2*s
// apart, so 2*s of them share each bank of 32 and are served one after another: 2-way at s = 1,
// 4-way at s = 2, 8-way at s = 4, 8 and 16 (then fewer threads are left than banks). Chapter 3
// counts the conflicts with Nsight Compute. One element per thread and half the threads idle
// from the first round on; n/256 atomics; 4-byte loads.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) interleaved_strided(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid;
    float v = 0.0f;
    if (i < a.n) {
        const float d = a.pred[i] - a.target[i];
        v = d * d;
    }
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = 1; s < kThreads; s *= 2) {
        const unsigned index = 2 * s * tid;
        if (index < kThreads) sdata[index] += sdata[index + s];
        __syncthreads();
    }
    if (tid == 0) add_block_sum(a.workspace, sdata[0]);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    // One target per prediction: Hinge's broadcast row is version 7's step.
    if (a->target_len != a->n) return cudaErrorNotSupported;
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    interleaved_strided<<<static_cast<unsigned>(ceil_div(a->n, kThreads)), kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
