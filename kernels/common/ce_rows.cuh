// Chapter 5's cross-entropy rows: what every kernel version from the final sum on shares, so that
// each version's file holds only its row kernels and its launch policy. Why a header: these
// pieces are the same in every version (bench/experiments/ch5_steps), and one copy keeps their
// results the same bits. T is the logits' type in memory, A the type arithmetic is done in
// (numerics.cuh: AccOf, to_acc, from_acc, Vec, exp_diff).
#pragma once
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#undef NDEBUG  // the bad-target assertion stays in every build, as PyTorch's CUDA_KERNEL_ASSERT
#include <assert.h>

#include "cuda_utils.cuh"
#include "dependent_launch.cuh"
#include "loss_args.h"
#include "numerics.cuh"
#include "reduce.cuh"  // warp_max, warp_sum: butterflies over kWidth lanes, in a fixed order

__device__ __forceinline__ float acc_log(float x) { return logf(x); }
__device__ __forceinline__ double acc_log(double x) { return log(x); }
__device__ __forceinline__ float acc_max(float a, float b) { return fmaxf(a, b); }  // NaN-dropping:
__device__ __forceinline__ double acc_max(double a, double b) { return fmax(a, b); }  // NaN still
// reaches the loss through the sum of exponentials, so a NaN logit gives a NaN loss.

// Reductions over the kTPR threads of one row: lanes of one warp (shuffles only, kTPR up to 32)
// or the whole block. The order of the additions is fixed: no timing changes a row.
template <int kTPR, class A> __device__ __forceinline__ A row_max(A v, A* smem) {
    v = warp_max<(kTPR < 32 ? kTPR : 32)>(v);
    if constexpr (kTPR > 32) {
        __syncthreads();  // smem may still be read by a previous reduction
        if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
        __syncthreads();
        v = smem[0];
#pragma unroll
        for (int w = 1; w < kTPR / 32; ++w) v = acc_max(v, smem[w]);
    }
    return v;
}

// Three sums at once (s, the sum of the logits, the target's logit); b only with label smoothing.
template <int kTPR, class A>
__device__ __forceinline__ void row_sum3(A& a, A& b, A& c, bool with_b, A* smem) {
    constexpr int kWidth = kTPR < 32 ? kTPR : 32;
    a = warp_sum<kWidth>(a);
    if (with_b) b = warp_sum<kWidth>(b);
    c = warp_sum<kWidth>(c);
    if constexpr (kTPR > 32) {
        constexpr int kWarps = kTPR / 32;
        __syncthreads();  // smem may still be read by a previous reduction
        if (threadIdx.x % 32 == 0) {
            smem[threadIdx.x / 32] = a;
            smem[kWarps + threadIdx.x / 32] = b;
            smem[2 * kWarps + threadIdx.x / 32] = c;
        }
        __syncthreads();
        a = smem[0];
        b = smem[kWarps];
        c = smem[2 * kWarps];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {
            a += smem[w];
            if (with_b) b += smem[kWarps + w];
            c += smem[2 * kWarps + w];
        }
    }
}

// The workspace: the mean's gradient factor (gradient_factor) first, the rows' losses after
// 64 KiB.
template <class A> __device__ __forceinline__ A* row_losses(const CrossEntropyArgs& a) {
    return reinterpret_cast<A*>(static_cast<char*>(a.workspace) + 64 * 1024);
}

// What every row kernel does once it knows the row's lse: the loss, and the gradient's scale.
struct RowTarget {
    int64_t t;
    bool ignored, bad;
};

__device__ __forceinline__ RowTarget read_target(const CrossEntropyArgs& a, int64_t row) {
    RowTarget r;
    r.t = a.target[row];
    r.ignored = r.t == a.ignore_index;
    r.bad = !r.ignored && (r.t < 0 || r.t >= a.classes);  // never used as an index
    return r;
}

template <class A> __device__ __forceinline__ A nan_value() { return A(NAN); }

// loss = lse - (1 - eps) x_t - eps/C sum_j x_j   (PyTorch's label smoothing, per row)
template <class A>
__device__ __forceinline__ A row_loss(const CrossEntropyArgs& a, const RowTarget& r, A lse, A xt,
                                      A sum_x) {
    if (r.ignored) return A(0);
    if (r.bad) return nan_value<A>();
    const A eps = static_cast<A>(a.label_smoothing);
    if (eps == A(0)) return lse - xt;
    // Two non-negative terms: no cancellation (C = 1 gives exactly 0, as PyTorch).
    return (A(1) - eps) * (lse - xt) + eps * (lse - sum_x / static_cast<A>(a.classes));
}

// Called by the thread that owns a row's result. The bad-target flag is written 0 by the thread
// that writes row 0, with no memset before the rows: a call with an out-of-range target never
// returns (the assertion), so 0 is the only value a caller can read. The assertion stops the
// kernel as PyTorch's own kernels do, and no call waits for the GPU to learn that its targets
// were fine (reading a flag back cost 34-168 us per call, bench/PERFLOG.md).
template <class T, class A>
__device__ __forceinline__ void write_row(const CrossEntropyArgs& a, int64_t row,
                                          const RowTarget& r, A lse, A xt, A sum_x) {
    const A loss = row_loss(a, r, lse, xt, sum_x);
    if (a.reduction == REDUCTION_NONE)
        static_cast<T*>(a.out)[row] = from_acc<T>(loss);
    else  // -0.0 marks an ignored row for the final count (a valid row's loss is >= +0)
        row_losses<A>(a)[row] = r.ignored ? -A(0) : loss;
    if (a.lse) static_cast<A*>(a.lse)[row] = lse;
    if (row == 0) *a.bad_target = 0;  // no memset: a bad target stops the kernel just below
    if (r.bad) assert(!"cross_entropy: a target is out of range [0, classes) and not ignore_index");
}

// The factor of this row's gradient: the guess of grad_output, divided by the count for the
// mean (gradient_factor wrote that quotient before this kernel); 0 for an ignored row, NaN for
// a bad target.
template <class A>
__device__ __forceinline__ A grad_scale(const CrossEntropyArgs& a, const RowTarget& r) {
    if (r.ignored) return A(0);
    if (r.bad) return nan_value<A>();
    if (a.reduction == REDUCTION_MEAN) return *static_cast<const A*>(a.workspace);
    return static_cast<A>(guess_factor(a.grad_guess));
}

// A grid-stride kernel's grid: enough blocks for the work, at most what fits on the GPU at once.
static unsigned grid_for(int64_t resident, int64_t blocks_needed) {
    return static_cast<unsigned>(blocks_needed < resident ? (blocks_needed > 0 ? blocks_needed : 1)
                                                          : resident);
}

// One block per row (or per 8 rows for warps) up to 2^24 blocks; beyond, blocks loop.
static unsigned row_grid(int64_t groups) {
    return static_cast<unsigned>(groups < (1LL << 24) ? groups : (1LL << 24));
}

// f(T{}) with T the logits' type in memory: a launcher's dispatch in one line,
//     return by_logits_dtype(a->logits_dtype, [&](auto t) { return forward<decltype(t)>(a, s); });
template <class F> static cudaError_t by_logits_dtype(int dtype, F f) {
    switch (dtype) {
        case LOGITS_F32: return f(float{});
        case LOGITS_BF16: return f(__nv_bfloat16{});
        case LOGITS_F16: return f(__half{});
        case LOGITS_F64: return f(double{});
    }
    return cudaErrorNotSupported;
}
