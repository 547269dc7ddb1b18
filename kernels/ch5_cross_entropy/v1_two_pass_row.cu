// Chapter 5, version 1: fused cross-entropy, one block per row, two passes over the row.
//
// Fixes (vs F.cross_entropy, which is log_softmax then nll_loss): PyTorch's eager path runs
// two kernels and writes, then reads back, a full rows x classes matrix of log-probabilities.
// Here one kernel reads each row and writes one loss per row:
//     pass 1: m = max_j x_j                       (a block-wide max)
//     pass 2: s = sum_j exp(x_j - m)              (a block-wide sum; subtracting m keeps exp finite)
//     loss   = m + log(s) - x_target              (log-sum-exp minus the target's logit)
// then a second, one-block kernel adds the per-row losses in a fixed order (float64, no atomics:
// the same bits on every run) and divides by the number of rows whose target is not ignore_index.
// Out-of-range targets are never used as an index: the row's loss becomes NaN and a flag is raised.
// Still slow: the row is read twice (the second read often hits L1/L2 for short rows, not for
// LLM vocabularies), the loads are 4-byte scalars, and a 256-thread block per row wastes most of
// its threads on short rows. fp32 and the forward only.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_utils.cuh"
#include "loss_args.h"
#include "reduce.cuh"  // block_max_all, block_sum_all: the result in every thread

constexpr int kThreads = 256;
constexpr int kFinishThreads = 1024;

__global__ void __launch_bounds__(kThreads) row_losses(CrossEntropyArgs a) {
    const int64_t C = a.classes;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const float* x = static_cast<const float*>(a.logits) + row * C;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < C; j += kThreads) m = fmaxf(m, x[j]);
        m = block_max_all<kThreads>(m);
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += kThreads) s += expf(x[j] - m);
        s = block_sum_all<kThreads>(s);
        if (threadIdx.x == 0) {
            const int64_t t = a.target[row];
            const bool ignored = t == a.ignore_index;
            const bool bad = !ignored && (t < 0 || t >= C);
            const float loss = ignored ? 0.0f : bad ? NAN : m + logf(s) - x[t];
            if (a.reduction == REDUCTION_NONE)
                static_cast<float*>(a.out)[row] = loss;
            else
                static_cast<float*>(a.workspace)[64 * 1024 / sizeof(float) + row] = loss;
        }
    }
}

// Counts the rows not ignored, raises the bad-target flag and writes the mean or the sum.
__global__ void __launch_bounds__(kFinishThreads) finish(CrossEntropyArgs a) {
    __shared__ double sums[kFinishThreads / 32];
    __shared__ long long counts[kFinishThreads / 32];
    __shared__ int bads[kFinishThreads / 32];
    const float* losses = static_cast<const float*>(a.workspace) + 64 * 1024 / sizeof(float);
    double acc = 0.0;
    long long count = 0;
    int bad = 0;
    for (int64_t i = threadIdx.x; i < a.rows; i += kFinishThreads) {
        const int64_t t = a.target[i];
        const bool ignored = t == a.ignore_index;
        count += !ignored;
        bad |= !ignored && (t < 0 || t >= a.classes);
        if (a.reduction != REDUCTION_NONE) acc += losses[i];
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
        count += __shfl_xor_sync(0xffffffffu, count, o);
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    if (threadIdx.x % 32 == 0) {
        sums[threadIdx.x / 32] = acc;
        counts[threadIdx.x / 32] = count;
        bads[threadIdx.x / 32] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        acc = 0.0;
        count = 0;
        bad = 0;
        for (int w = 0; w < kFinishThreads / 32; ++w) {
            acc += sums[w];
            count += counts[w];
            bad |= bads[w];
        }
        *a.bad_target = bad;
        if (a.reduction == REDUCTION_MEAN)  // 0 / 0 = NaN when every row is ignored, as PyTorch
            *static_cast<float*>(a.out) = static_cast<float>(acc / static_cast<double>(count));
        else if (a.reduction == REDUCTION_SUM)
            *static_cast<float*>(a.out) = static_cast<float>(acc);
    }
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->logits_dtype != LOGITS_F32 || a->grad || a->lse || a->label_smoothing != 0.0f)
        return cudaErrorNotSupported;  // version 3 has the rest
    const unsigned blocks = static_cast<unsigned>(a->rows < (1LL << 30) ? a->rows : (1LL << 30));
    row_losses<<<blocks, kThreads, 0, stream>>>(*a);
    finish<<<1, kFinishThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}
