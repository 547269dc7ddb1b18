// Exercise 7.4 (solution): few long rows, each split over blocks, merged by a second kernel.
//
// Forward only, float32 logits. A batch of a few rows of a large vocabulary (the last position of
// 32 sequences, say) gives version 3's one block per row only a few SMs to read with. Here each
// row is cut into `slices` equal slices; one block per (row, slice) computes its slice's
// (max, sum of exp(x - max)) and writes it to the workspace; then one block merges each row's
// pairs in a fixed order (the online softmax's rule, on whole sums), finishes the losses and
// reduces them. The row is still read once; what changed is how many SMs read it.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_utils.cuh"  // resident_blocks, ceil_div
#include "loss_args.h"
#include "numerics.cuh"  // exp_diff: exp(x - m) as one multiply and one MUFU.EX2
#include "reduce.cuh"    // block_max_all, block_sum_all

constexpr int kThreads = 256;        // per slice
constexpr int kLoads = 4;            // 16-byte loads in flight per thread
constexpr int kFinishThreads = 1024;

struct MaxSum {
    float m;  // the largest logit seen (-inf before any)
    float s;  // sum of exp(x - m) over the logits seen
};

// Two partial (m, s) into one: the sum taken relative to the smaller max is rescaled to the larger.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
    return {m, a.s * exp_diff(a.m, m) + b.s * exp_diff(b.m, m)};
}

// Block b reads slice b % slices of row b / slices: columns [begin, end).
__global__ void __launch_bounds__(kThreads) slice_stats(CrossEntropyArgs a, int slices,
                                                        MaxSum* pairs) {
    const int64_t row = blockIdx.x / slices, slice = blockIdx.x % slices;
    const int64_t C = a.classes;
    const int64_t width = ((C + slices - 1) / slices + 3) / 4 * 4;  // whole 16-byte vectors
    const int64_t begin = slice * width;
    const int64_t end = begin + width < C ? begin + width : C;  // the last slices may be empty
    const float* x = static_cast<const float*>(a.logits) + row * C;
    MaxSum r{-INFINITY, 0.0f};
    if (C % 4 == 0) {  // every row, so every slice, starts on a 16-byte boundary
        const float4* v = reinterpret_cast<const float4*>(x);
        for (int64_t base = begin / 4 + threadIdx.x; base < end / 4; base += kThreads * kLoads) {
            float4 in[kLoads];
            float chunk_max = -INFINITY;
#pragma unroll
            for (int l = 0; l < kLoads; ++l) {  // every load issued before any math
                const int64_t i = base + l * kThreads;
                in[l] = i < end / 4 ? v[i] : make_float4(-INFINITY, -INFINITY, -INFINITY,
                                                          -INFINITY);
                chunk_max = fmaxf(fmaxf(chunk_max, fmaxf(in[l].x, in[l].y)),
                                  fmaxf(in[l].z, in[l].w));
            }
            MaxSum chunk{chunk_max, 0.0f};
            if (chunk_max != -INFINITY)
#pragma unroll
                for (int l = 0; l < kLoads; ++l)
                    chunk.s += exp_diff(in[l].x, chunk_max) + exp_diff(in[l].y, chunk_max) +
                               exp_diff(in[l].z, chunk_max) + exp_diff(in[l].w, chunk_max);
            r = merge(r, chunk);
        }
    } else {
        for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) r = merge(r, {x[j], 1.0f});
    }
    const float m = block_max_all<kThreads>(r.m);
    const float s = block_sum_all<kThreads>(m == -INFINITY ? 0.0f : r.s * exp_diff(r.m, m));
    if (threadIdx.x == 0) pairs[blockIdx.x] = {m, s};
}

// Enough slices for the whole GPU to run as many slice_stats blocks at once as fit on it. The
// occupancy API counts them for this kernel on this GPU (resident_blocks): the SM's threads,
// registers and shared memory set the number, which differs between an H100 (2048 threads per
// SM), an RTX 4090 (1536) and a T4.
static int64_t slices_wanted(int64_t rows) {
    static const int64_t resident = resident_blocks(slice_stats, kThreads);  // asked once
    return ceil_div(resident, rows);
}

// The slices a launch uses: as many as wanted, but each at least one round of the block's loads
// (kThreads * kLoads * 4 floats), the pairs within the workspace, and at least one.
static int slices_per_row(const CrossEntropyArgs* a) {
    constexpr int kRound = kThreads * kLoads * 4;
    const int64_t longest = (a->classes + kRound - 1) / kRound;
    const int64_t room = CE_WORKSPACE_BYTES(a->rows) / (a->rows * int64_t(sizeof(MaxSum)));
    int64_t slices = slices_wanted(a->rows);
    if (slices > longest) slices = longest;
    if (slices > room) slices = room;
    return slices < 1 ? 1 : static_cast<int>(slices);
}

// One block: each thread merges its rows' pairs in slice order, then the losses are added in a
// fixed order in float64 (the same bits on every run).
__global__ void __launch_bounds__(kFinishThreads) finish(CrossEntropyArgs a, int slices,
                                                         const MaxSum* pairs) {
    double total = 0.0, counted = 0.0, bad_rows = 0.0;
    for (int64_t row = threadIdx.x; row < a.rows; row += kFinishThreads) {
        MaxSum r = pairs[row * slices];
        for (int i = 1; i < slices; ++i) r = merge(r, pairs[row * slices + i]);
        const float lse = r.m + logf(r.s);
        const int64_t t = a.target[row];
        const bool ignored = t == a.ignore_index;
        const bool bad = !ignored && (t < 0 || t >= a.classes);
        const float* x = static_cast<const float*>(a.logits) + row * a.classes;
        const float loss = ignored || bad ? 0.0f : lse - x[t];
        if (a.lse) static_cast<float*>(a.lse)[row] = lse;
        if (a.reduction == REDUCTION_NONE) static_cast<float*>(a.out)[row] = loss;
        total += loss;
        counted += ignored ? 0.0 : 1.0;
        bad_rows += bad ? 1.0 : 0.0;
    }
    total = block_sum_all<kFinishThreads>(total);
    counted = block_sum_all<kFinishThreads>(counted);
    bad_rows = block_sum_all<kFinishThreads>(bad_rows);
    if (threadIdx.x != 0) return;
    *a.bad_target = bad_rows > 0.0;  // written here, every call: no memset before the launches
    if (a.reduction == REDUCTION_NONE) return;
    const double result = a.reduction == REDUCTION_MEAN ? total / counted : total;
    *static_cast<float*>(a.out) = static_cast<float>(result);
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->logits_dtype != LOGITS_F32 || a->grad != nullptr || a->label_smoothing != 0.0)
        return cudaErrorNotSupported;
    const int slices = slices_per_row(a);
    if (a->rows * slices > 0x7fffffff) return cudaErrorInvalidValue;  // one block per slice
    MaxSum* pairs = static_cast<MaxSum*>(a->workspace);
    const unsigned blocks = static_cast<unsigned>(a->rows * slices);
    slice_stats<<<blocks, kThreads, 0, stream>>>(*a, slices, pairs);
    finish<<<1, kFinishThreads, 0, stream>>>(*a, slices, pairs);
    return cudaGetLastError();
}
