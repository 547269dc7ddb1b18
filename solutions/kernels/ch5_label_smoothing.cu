// Exercise 5.3 (solution): cross-entropy with label smoothing.
//
// One block per row, two passes over the row, float32 logits, ignore_index as in exercise 5.1.
// With smoothing eps the target distribution puts 1 - eps on the target class and eps / C on
// every class, so the loss of a row is
//     (1 - eps) (lse - x_t) + (eps / C) sum_j (lse - x_j)  =  lse - (1 - eps) x_t - (eps / C) sum_j x_j.
// What the exercise adds to the skeleton (kernels/exercises/ch5_label_smoothing.cu): the sum of
// the row's logits, taken in the second pass (no extra read), and the formula above.
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
    const bool ignored = t == a.ignore_index;
    const bool bad = !ignored && (t < 0 || t >= a.classes);

    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.classes; j += kThreads) m = fmaxf(m, x[j]);
    m = block_reduce<true>(m, shared);
    float s = 0.0f, sum_x = 0.0f;
    for (int64_t j = threadIdx.x; j < a.classes; j += kThreads) {
        const float v = x[j];
        if (m != -INFINITY) s += expf(v - m);  // a row of -inf only: exp(-inf - -inf) is NaN
        sum_x += v;  // Solution: the smoothing term needs the row's sum, read in the same pass
    }
    s = block_reduce<false>(s, shared);
    sum_x = block_reduce<false>(sum_x, shared);

    if (threadIdx.x == 0) {
        const float lse = m + logf(s);
        const float eps = a.label_smoothing;
        // Solution: 1 - eps of the weight on the target class, eps spread evenly over all classes
        const float loss = ignored || bad ? 0.0f
                           : lse - (1.0f - eps) * x[t] - eps / static_cast<float>(a.classes) * sum_x;
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
        count += a.target[i] != a.ignore_index;
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
    if (a->logits_dtype != LOGITS_F32 || a->grad != nullptr) return cudaErrorNotSupported;
    if (a->rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
    double* losses = static_cast<double*>(a->workspace);
    cudaError_t err = cudaMemsetAsync(a->bad_target, 0, sizeof(int), stream);
    if (err != cudaSuccess) return err;
    row_losses<<<static_cast<unsigned>(a->rows), kThreads, 0, stream>>>(*a, losses);
    if (a->reduction != REDUCTION_NONE) finish<<<1, kFinalThreads, 0, stream>>>(*a, losses);
    return cudaGetLastError();
}
