// Chapter 3, version 1: a tree in shared memory, interleaved addressing (Harris's kernel 1).
//
// New in this chapter: instead of meeting in atomics, the values of a block are added pairwise
// in shared memory, log2(256) = 8 rounds separated by __syncthreads(). One thread per element,
// one block per 256 elements; each block still ends with ONE atomicAdd of its sum, spread over
// 1024 slots (kernels/common/block_slots.cuh: on one address these atomics would hide every
// step of this chapter), so the result is still not deterministic (chapter 4 fixes that).
// Still slow: in round s only threads with tid % (2*s) == 0 work, so the active threads are
// scattered over all warps: every warp stays busy (divergent) however few of its threads work;
// 4-byte loads; one block per 256 elements. (The % costs nothing: the loop is unrolled, 2*s is a
// constant in each round and the compiler turns tid % (2*s) into a bit mask, one LOP3 in the
// SASS.)
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) interleaved_divergent(ReductionArgs a) {
    __shared__ float sdata[kThreads];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid;
    float v = 0.0f;  // threads past the end add zero: no thread may skip the __syncthreads()
    if (i < a.n) {
        const float d = a.pred[i] - a.target[i];
        v = d * d;
    }
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = 1; s < kThreads; s *= 2) {
        if (tid % (2 * s) == 0) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) add_block_sum(a.workspace, sdata[0]);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    // One target per prediction: Hinge's broadcast row is version 7's step.
    if (a->target_len != a->n) return cudaErrorNotSupported;
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    interleaved_divergent<<<static_cast<unsigned>(ceil_div(a->n, kThreads)), kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
