// Exercise 5.1 (skeleton): cross-entropy that skips rows whose target is ignore_index.
//
// One block per row, two passes over the row (max, then the sum of exp(x - max)), float32 logits
// only. It computes the right loss for every row whose target is a class, but it knows nothing
// of ignore_index: a target of -100 is reported as out of range. Make it follow PyTorch: a row
// whose target equals a.ignore_index is valid input and adds nothing, and the mean is taken over
// the rows that are not ignored. Find every place that has to change; the check tells you which
// cases are still wrong. The answer is in solutions/kernels/ch5_ignore_index.cu.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "loss_args.h"

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The whole block's max (kMax) or sum of v; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = kMax ? warp_max(v) : warp_sum(v);
    __syncthreads();  // shared may still be read by the previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? shared[lane] : (kMax ? -INFINITY : 0.0f);
    return kMax ? warp_max(v) : warp_sum(v);
}

__global__ void __launch_bounds__(kThreads) row_losses(CrossEntropyArgs a, double* losses) {
    __shared__ float shared[32];
    const int64_t row = blockIdx.x;
    const float* x = static_cast<const float*>(a.logits) + row * a.classes;
    const int64_t t = a.target[row];
    const bool bad = t < 0 || t >= a.classes;

    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.classes; j += kThreads) m = fmaxf(m, x[j]);
    m = block_reduce<true>(m, shared);
    float s = 0.0f;
    if (m != -INFINITY)  // a row of -inf only: exp(-inf - -inf) would be NaN
        for (int64_t j = threadIdx.x; j < a.classes; j += kThreads) s += expf(x[j] - m);
    s = block_reduce<false>(s, shared);

    if (threadIdx.x == 0) {
        const float lse = m + logf(s);
        const float loss = bad ? 0.0f : lse - x[t];
        if (bad) *a.bad_target = 1;
        if (a.lse) static_cast<float*>(a.lse)[row] = lse;
        if (a.reduction == REDUCTION_NONE)
            static_cast<float*>(a.out)[row] = loss;
        else
            losses[row] = loss;
    }
}

// One block adds the row losses in a fixed order (deterministic) and writes the 0-d result.
__global__ void __launch_bounds__(kFinalThreads) finish(CrossEntropyArgs a, const double* losses) {
    __shared__ double sums[kFinalThreads / 32];
    __shared__ long long counts[kFinalThreads / 32];
    double acc = 0.0;
    long long count = 0;
    for (int64_t i = threadIdx.x; i < a.rows; i += kFinalThreads) {
        acc += losses[i];
        count += 1;
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
        count += __shfl_xor_sync(0xffffffffu, count, o);
    }
    if (threadIdx.x % 32 == 0) {
        sums[threadIdx.x / 32] = acc;
        counts[threadIdx.x / 32] = count;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = sums[threadIdx.x];
        count = counts[threadIdx.x];
        for (int o = 16; o > 0; o >>= 1) {
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
            count += __shfl_xor_sync(0xffffffffu, count, o);
        }
        if (threadIdx.x == 0) {
            // 0 / 0 is NaN: the mean over no rows, as PyTorch answers
            const double result = a.reduction == REDUCTION_MEAN ? acc / static_cast<double>(count) : acc;
            *static_cast<float*>(a.out) = static_cast<float>(result);
        }
    }
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->logits_dtype != LOGITS_F32 || a->grad != nullptr || a->label_smoothing != 0.0f)
        return cudaErrorNotSupported;
    if (a->rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
    double* losses = static_cast<double*>(a->workspace);
    cudaError_t err = cudaMemsetAsync(a->bad_target, 0, sizeof(int), stream);
    if (err != cudaSuccess) return err;
    row_losses<<<static_cast<unsigned>(a->rows), kThreads, 0, stream>>>(*a, losses);
    if (a->reduction != REDUCTION_NONE) finish<<<1, kFinalThreads, 0, stream>>>(*a, losses);
    return cudaGetLastError();
}
