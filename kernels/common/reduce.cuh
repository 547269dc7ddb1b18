// Warp and block reductions in a fixed order, for the kernels from chapter 4 on (chapters 2-3
// write their own: that is what they teach). Chapter 5's version 3 still has its own
// width-templated warp_sum and warp_max, to go when chapter 8, which builds it too, is next
// re-executed. The order of the additions depends only on the width or the block size, so the
// same inputs always give the same bits.
#pragma once
#include <cuda_runtime.h>

// Over kWidth consecutive lanes (a power of two up to 32), by butterfly shuffles: every lane of
// the group ends with the result.
template <int kWidth = 32, class A>
__device__ __forceinline__ A warp_sum(A v) {
    for (int offset = kWidth / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// The sum over a block of kBlock threads (each warp's tree, then warp 0 over the warps), in
// every thread of warp 0. Safe to call several times in a row (it waits before reusing smem).
template <int kBlock, class A>
__device__ __forceinline__ A block_sum(A v) {
    static_assert(kBlock % 32 == 0 && kBlock <= 1024, "whole warps, at most 32 of them");
    __shared__ A warp_sums[kBlock / 32];
    v = warp_sum(v);
    __syncthreads();  // a previous call's warp_sums may still be read
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) v = warp_sum(threadIdx.x < kBlock / 32 ? warp_sums[threadIdx.x] : A(0));
    return v;
}
