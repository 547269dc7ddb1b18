// Warp and block reductions in a fixed order, for the kernels from chapter 4 on (chapters 2-3
// write their own: that is what they teach). The order of the additions depends only on the
// width or the block size, so the same inputs always give the same bits.
#pragma once
#include <cuda_runtime.h>
#include <math.h>

struct SumOp {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
// fmax drops a NaN operand: a kernel that must not lose a NaN carries it through a sum as well
// (the cross-entropy's sum of exponentials).
struct MaxOp {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const {
        return fmax(a, b);
    }
};

// Over kWidth consecutive lanes (a power of two up to 32), by butterfly shuffles: every lane of
// the group ends with the result.
template <int kWidth = 32, class A, class Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
    for (int offset = kWidth / 2; offset > 0; offset >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
template <int kWidth = 32, class A>
__device__ __forceinline__ A warp_sum(A v) { return warp_reduce<kWidth>(v, SumOp{}); }
template <int kWidth = 32, class A>
__device__ __forceinline__ A warp_max(A v) { return warp_reduce<kWidth>(v, MaxOp{}); }

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

// The sum or the max over a block of kBlock threads, in every thread of the block: each warp's
// butterfly, then every thread combines the warps' results in the same order (chapter 5's
// versions 1 and 2 need the row's max in every thread before they sum).
template <int kBlock, class A, class Op>
__device__ __forceinline__ A block_reduce_all(A v, Op op) {
    static_assert(kBlock % 32 == 0 && kBlock <= 1024, "whole warps, at most 32 of them");
    __shared__ A warp_results[kBlock / 32];
    v = warp_reduce(v, op);
    __syncthreads();  // a previous call's warp_results may still be read
    if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = v;
    __syncthreads();
    v = warp_results[0];
    for (int w = 1; w < kBlock / 32; ++w) v = op(v, warp_results[w]);
    return v;
}
template <int kBlock, class A>
__device__ __forceinline__ A block_sum_all(A v) { return block_reduce_all<kBlock>(v, SumOp{}); }
template <int kBlock, class A>
__device__ __forceinline__ A block_max_all(A v) { return block_reduce_all<kBlock>(v, MaxOp{}); }
