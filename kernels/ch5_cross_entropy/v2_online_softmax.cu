// Chapter 5, version 2: one pass over the row with the online softmax (Milakov & Gimelshein, 2018).
//
// Fixes (vs version 1): version 1 reads every row twice, once for the max and once for the sum of
// exponentials. Here each thread keeps a running max m and a running sum s of exp(x - m); when a
// larger value arrives, the sum so far is rescaled:
//     m' = max(m, x),   s' = s * exp(m - m') + exp(x - m')
// so the row is read once. At the end the threads' (m, s) pairs are merged the same way: the
// block's max M, then sum_i s_i * exp(m_i - M). The target's logit is fetched by one thread while
// the row streams in. Reduction, ignore_index and bad targets as in version 1.
// Still slow: 4-byte scalar loads with one load in flight per thread per step; the exp of the
// rescale runs per element; a 256-thread block per row wastes threads on short rows and a
// 16 KiB row needs two syncs per block that better occupancy would hide. fp32, forward only.
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
        const int64_t t = a.target[row];
        const bool ignored = t == a.ignore_index;
        const bool bad = !ignored && (t < 0 || t >= C);
        const float xt = threadIdx.x == 0 && !ignored && !bad ? x[t] : 0.0f;

        float m = -INFINITY, s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += kThreads) {
            const float v = x[j];
            if (v == -INFINITY) continue;  // adds 0; and exp(-inf - -inf) would be NaN
            const float m_new = fmaxf(m, v);  // drops NaN, but exp(NaN - m) poisons s, as it must
            s = s * expf(m - m_new) + expf(v - m_new);
            m = m_new;
        }
        const float row_m = block_max_all<kThreads>(m);
        s *= m == row_m ? 1.0f : expf(m - row_m);
        s = block_sum_all<kThreads>(s);
        if (threadIdx.x == 0) {
            const float loss = ignored ? 0.0f : bad ? NAN : row_m + logf(s) - xt;
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
