// Solution (chapter 3 exercise): version 2 with a padded shared-memory tree.
//
// Word w of the tree lives at sdata[w + w / 32]: one unused word after every 32. In round s a
// warp touches words 2*s*tid; with the padding, word 32*k lands k banks further on, so the
// words that shared a bank (32 / (2*s) apart in the warp) now fall in different banks. The order
// of the additions in a block is version 2's.
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_slots.cuh"
#include "cuda_utils.cuh"
#include "loss_args.h"

constexpr int kThreads = 256;

// Where word w of the tree is stored: one unused word after every 32.
__device__ __forceinline__ unsigned padded(unsigned w) { return w + w / 32; }

__global__ void __launch_bounds__(kThreads) padded_tree(ReductionArgs a) {
    __shared__ float sdata[kThreads + kThreads / 32];
    const unsigned tid = threadIdx.x;
    const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid;
    float v = 0.0f;
    if (i < a.n) {
        const float d = a.pred[i] - a.target[a.target_len == a.n ? i : i % a.target_len];
        v = d * d;
    }
    sdata[padded(tid)] = v;
    __syncthreads();
    for (unsigned s = 1; s < kThreads; s *= 2) {
        const unsigned index = 2 * s * tid;
        if (index < kThreads) sdata[padded(index)] += sdata[padded(index + s)];
        __syncthreads();
    }
    if (tid == 0) add_block_sum(a.workspace, sdata[padded(0)]);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t stream) {
    cudaError_t err = clear_slots(a->workspace, stream);
    if (err != cudaSuccess) return err;
    padded_tree<<<static_cast<unsigned>(ceil_div(a->n, kThreads)), kThreads, 0, stream>>>(*a);
    slots_mean<<<1, kSlots, 0, stream>>>(a->workspace, a->n, a->out);
    return cudaGetLastError();
}
