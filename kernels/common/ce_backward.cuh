// Chapter 5's cross-entropy, the gradient's kernels that are not row kernels: the mean's factor
// counted before the rows (gradient_factor), the backward op that rescales a fused gradient
// (scale_grad) and the one that reads the logits again from the saved lse (backward_from_lse).
// Why a header: they are the same in every version that has a backward
// (bench/experiments/ch5_steps), and their lesson is in the row kernels, which write the
// gradient or the lse they start from.
#pragma once
#include "ce_finish.cuh"  // kCountThreads

// The mean's gradient factor before the row kernel writes the gradient: one block counts the
// targets that are not ignore_index and writes guess / count (mean + gradient only). Each row
// then reads one value, as it read the count before the guess existed: reading the guess beside
// the count and dividing made version 4's fp32 forward+backward 2.5% slower (bench/PERFLOG.md).
template <class A>
__global__ void __launch_bounds__(kCountThreads) gradient_factor(CrossEntropyArgs a) {
    __shared__ long long counts[kCountThreads / 32];
    long long count = 0;
    for (int64_t i = threadIdx.x; i < a.rows; i += kCountThreads) count += a.target[i] != a.ignore_index;
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
    if (threadIdx.x % 32 == 0) counts[threadIdx.x / 32] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kCountThreads / 32; ++w) count += counts[w];  // (lane 0 holds w = 0)
        *static_cast<A*>(a.workspace) =
            static_cast<A>(guess_factor(a.grad_guess)) / static_cast<A>(count);
    }
}

// grad *= grad_output / the forward's guess of it, with both read on the GPU: no host
// synchronisation. A right guess (or loss.backward()'s 1 without one) makes that 1, and then
// every block returns at once. Writes grad_output as the next guess.
template <class T, int kVec>
__global__ void scale_grad(CrossEntropyArgs a, int64_t nvec) {
    using A = typename AccOf<T>::type;
    const A wanted = to_acc(*static_cast<const T*>(a.grad_output));
    if (a.next_guess != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
        *a.next_guess = static_cast<float>(wanted);
    const A g = wanted / static_cast<A>(guess_factor(a.grad_guess));
    if (g == A(1)) return;
    Vec<T, kVec>* grad = static_cast<Vec<T, kVec>*>(a.grad);
    for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < nvec;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        Vec<T, kVec> x = grad[v];
#pragma unroll
        for (int k = 0; k < kVec; ++k) x.v[k] = from_acc<T>(to_acc(x.v[k]) * g);
        grad[v] = x;
    }
}

// reduction "none": grad[i, j] = grad_output[i] * (softmax(x_i)_j - (1 - eps) [j == t_i] - eps / C)
// from the lse saved by the forward; element-wise over vectors (kVec divides C, so a vector never
// straddles two rows).
template <class T, int kVec>
__global__ void backward_from_lse(CrossEntropyArgs a, int64_t nvec) {
    using A = typename AccOf<T>::type;
    const Vec<T, kVec>* logits = static_cast<const Vec<T, kVec>*>(a.logits);
    Vec<T, kVec>* grad = static_cast<Vec<T, kVec>*>(a.grad);
    const A eps = static_cast<A>(a.label_smoothing);
    for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < nvec;
         v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t first = v * kVec;
        const int64_t row = first / a.classes;
        const RowTarget r = read_target(a, row);
        const A scale = r.ignored ? A(0)
                        : r.bad   ? nan_value<A>()
                                  : to_acc(static_cast<const T*>(a.grad_output)[row]);
        const A lse = static_cast<const A*>(a.lse)[row];
        const Vec<T, kVec> in = logits[v];
        Vec<T, kVec> out;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            A g = exp_diff(to_acc(in.v[k]), lse) - eps / static_cast<A>(a.classes);
            if (first + k - row * a.classes == r.t) g -= A(1) - eps;
            out.v[k] = from_acc<T>(g * scale);
        }
        grad[v] = out;
    }
}

// The launchers of the two backward ops: 16-byte vectors where the sizes and addresses allow,
// else one value at a time; a grid of what fits on the GPU at once.
template <class T>
static cudaError_t launch_scale_grad(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const int64_t n = a->rows * a->classes;
    if (n % kVec == 0 && is_aligned16(a->grad)) {
        static const int64_t resident = resident_blocks(scale_grad<T, kVec>, 256);  // asked once
        scale_grad<T, kVec><<<grid_for(resident, ceil_div(n / kVec, 256)), 256, 0, stream>>>(
            *a, n / kVec);
    } else {
        static const int64_t resident = resident_blocks(scale_grad<T, 1>, 256);
        scale_grad<T, 1><<<grid_for(resident, ceil_div(n, 256)), 256, 0, stream>>>(*a, n);
    }
    return cudaGetLastError();
}

template <class T>
static cudaError_t launch_backward_from_lse(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const int64_t n = a->rows * a->classes;
    if (a->classes % kVec == 0 && is_aligned16(a->logits) && is_aligned16(a->grad)) {
        static const int64_t resident = resident_blocks(backward_from_lse<T, kVec>, 256);
        backward_from_lse<T, kVec><<<grid_for(resident, ceil_div(n / kVec, 256)), 256, 0, stream>>>(
            *a, n / kVec);
    } else {
        static const int64_t resident = resident_blocks(backward_from_lse<T, 1>, 256);
        backward_from_lse<T, 1><<<grid_for(resident, ceil_div(n, 256)), 256, 0, stream>>>(*a, n);
    }
    return cudaGetLastError();
}
