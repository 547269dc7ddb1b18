// Chapter 5, step 11: bf16, fp16 and fp64 logits; the final cross-entropy, forward and backward.
//
// Fixes (vs step 10): bf16 and fp16 rows bring twice the values per byte of fp32: each kernel
// takes the logits' type T as a template argument, loads 16 bytes (8 values) at a time and
// accumulates in A = float (common/numerics.cuh: AccOf, to_acc, from_acc). fp64 logits, for
// torch.autograd.gradcheck, take one simple path: the streaming kernel, one value per load, in
// double. With expf (step 5), bf16 rows ran out of instruction issue before memory bandwidth;
// with exp_diff they read at close to it. This file does what kernels/ch5_cross_entropy/
// v3_fused_rows.cu does, line for line in its kernels (bench/experiments/ch5_steps/README.md).
// Still slow: few very long rows (7 x 131075) use only 7 blocks (chapter 7 splits a row over a
// cluster); rows longer than 512 whose length is not a multiple of the vector width stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ce_backward.cuh"  // gradient_factor, scale_grad, backward_from_lse and their launchers
#include "ce_finish.cuh"    // finish_losses: the fixed-order float64 sum of the rows' losses
#include "ce_rows.cuh"      // row_max, row_sum3, read_target, write_row, grad_scale, row_grid

constexpr int kGroupThreads = 256;   // block size when a row takes 32 threads or fewer
constexpr int kStreamThreads = 512;  // block size of the streaming (long-row) kernel
constexpr int kShortLoads = 16;      // 4-byte loads per lane for short rows of any length
constexpr int kStreamLoads = 4;      // vectors in flight per thread in the streaming kernel

// Rows that fit in registers. kTPR threads per row (up to 32: part of a warp, else the block),
// each holding kLoads vectors of kVec values. The row is read once; its gradient, when asked
// for, is written from the registers.
template <class T, int kTPR, int kVec, int kLoads>
__global__ void __launch_bounds__(kTPR > 32 ? kTPR : kGroupThreads)
row_cached(CrossEntropyArgs a) {
    let_next_kernel_start();
    using A = typename AccOf<T>::type;
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    constexpr int kRowsPerBlock = kBlock / kTPR;
    __shared__ A smem[3 * (kTPR > 32 ? kTPR / 32 : 1)];
    const int tid = threadIdx.x % kTPR;
    const int64_t C = a.classes;
    const int64_t nvec = C / kVec;  // kVec divides C (the launcher checks)
    const bool smoothing = a.label_smoothing != 0.0;

    // The loop runs the same number of times in every thread of the block: the shuffles of a
    // group need the whole warp, so threads past the last row compute on -inf and store nothing.
    for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; first < a.rows;
         first += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
        const int64_t row = first + threadIdx.x / kTPR;
        const bool valid = kRowsPerBlock == 1 || row < a.rows;  // a block per row: always
        const T* x_row = static_cast<const T*>(a.logits) + row * C;
        // This thread's loads that fall in the row: l * kTPR + tid < nvec. The others hold -inf,
        // which adds nothing to the max or the sum: their exponentials are skipped, not computed
        // (a 2048-class fp32 row fills half of its 4096-value tile, a 32-class row a quarter).
        const int loads = valid ? static_cast<int>((nvec - tid + kTPR - 1) / kTPR) : 0;
        // Every load of the row is issued before any arithmetic.
        A x[kLoads][kVec];
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            const int64_t v = static_cast<int64_t>(l) * kTPR + tid;
            if (l < loads) {
                const Vec<T, kVec> in = reinterpret_cast<const Vec<T, kVec>*>(x_row)[v];
#pragma unroll
                for (int k = 0; k < kVec; ++k) x[l][k] = to_acc(in.v[k]);
            } else {
#pragma unroll
                for (int k = 0; k < kVec; ++k) x[l][k] = -A(INFINITY);
            }
        }
        const RowTarget r = valid ? read_target(a, row) : RowTarget{0, true, false};
        A m = -A(INFINITY);
#pragma unroll
        for (int l = 0; l < kLoads; ++l)
            if (l < loads)
#pragma unroll
                for (int k = 0; k < kVec; ++k) m = acc_max(m, x[l][k]);
        m = row_max<kTPR>(m, smem);

        // x becomes exp(x - m): the gradient reuses it as softmax * sum. The target's logit is
        // picked out of the registers by the thread that holds it (no dependent load).
        // Where the target sits in the registers: (load t_l, element t_k) of thread t_tid.
        int t_l = -1, t_k = -1;
        if (!r.ignored && !r.bad && (r.t / kVec) % kTPR == tid) {
            t_l = static_cast<int>(r.t / kVec / kTPR);
            t_k = static_cast<int>(r.t % kVec);
        }
        A s = A(0), sum_x = A(0), xt = A(0);
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            if (l >= loads) continue;
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
                if (smoothing) sum_x += x[l][k];
                if (l == t_l && k == t_k) xt = x[l][k];
                x[l][k] = exp_diff(x[l][k], m);
                s += x[l][k];
            }
        }
        row_sum3<kTPR>(s, sum_x, xt, smoothing, smem);
        const A lse = m + acc_log(s);
        if (tid == 0 && valid) write_row<T>(a, row, r, lse, xt, sum_x);

        if (a.grad && valid) {
            const A scale = grad_scale<A>(a, r);
            const A p_scale = scale / s;  // softmax_j * scale = exp(x_j - m) * scale / s
            const A eps = static_cast<A>(a.label_smoothing);
            const A smooth = eps / static_cast<A>(C) * scale;
            const A hit = (A(1) - eps) * scale;
            T* g_row = static_cast<T*>(a.grad) + row * C;
#pragma unroll
            for (int l = 0; l < kLoads; ++l) {
                const int64_t v = static_cast<int64_t>(l) * kTPR + tid;
                if (l < loads) {
                    Vec<T, kVec> out;
#pragma unroll
                    for (int k = 0; k < kVec; ++k) {
                        A g = x[l][k] * p_scale - smooth;
                        if (l == t_l && k == t_k) g -= hit;
                        out.v[k] = from_acc<T>(g);
                    }
                    reinterpret_cast<Vec<T, kVec>*>(g_row)[v] = out;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rows too long for registers: a block per row, online softmax (a running max and a sum rescaled
// whenever the max grows), kStreamLoads vectors in flight per thread. When kVec does not divide
// the row length, rows start off a 16-byte boundary: a few scalars before the first vector (head)
// and after the last (tail) are read one by one, the rest as vectors. The logits' base address
// is 16-byte aligned (the binding copies it otherwise); kVec == 1 serves fp64 (gradcheck).
template <class T, int kVec>
__global__ void __launch_bounds__(kStreamThreads) row_streaming(CrossEntropyArgs a) {
    let_next_kernel_start();
    using A = typename AccOf<T>::type;
    constexpr int kTPR = kStreamThreads;
    __shared__ A smem[3 * (kTPR / 32)];
    const int tid = threadIdx.x;
    const int64_t C = a.classes;
    const bool smoothing = a.label_smoothing != 0.0;

    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const T* x_row = static_cast<const T*>(a.logits) + row * C;
        const int64_t misaligned = (row * C) % kVec;
        const int64_t head = misaligned == 0 ? 0 : (kVec - misaligned < C ? kVec - misaligned : C);
        const int64_t nvec = (C - head) / kVec;
        const int64_t tail = C - head - nvec * kVec;  // < kVec
        const Vec<T, kVec>* v_row = reinterpret_cast<const Vec<T, kVec>*>(x_row + head);
        const RowTarget r = read_target(a, row);
        // The target's logit, fetched while the row is still on its way.
        A xt = A(0);
        if (tid == 0 && !r.ignored && !r.bad) xt = to_acc(x_row[r.t]);

        A m = -A(INFINITY), s = A(0), sum_x = A(0);
        if (tid < head + tail) {  // the scalars start the running (max, sum)
            const int64_t j = tid < head ? tid : head + nvec * kVec + (tid - head);
            const A x = to_acc(x_row[j]);
            m = x;  // a NaN here is dropped by the max below but poisons s: the loss is NaN
            s = x == -A(INFINITY) ? A(0) : A(1);
            sum_x = x;
        }
        for (int64_t base = 0; base < nvec; base += kTPR * kStreamLoads) {
            A x[kStreamLoads][kVec];
            A chunk_max = -A(INFINITY);
#pragma unroll
            for (int l = 0; l < kStreamLoads; ++l) {
                const int64_t v = base + l * kTPR + tid;
                if (v < nvec) {
                    const Vec<T, kVec> in = v_row[v];
#pragma unroll
                    for (int k = 0; k < kVec; ++k) {
                        x[l][k] = to_acc(in.v[k]);
                        if (smoothing) sum_x += x[l][k];
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < kVec; ++k) x[l][k] = -A(INFINITY);
                }
#pragma unroll
                for (int k = 0; k < kVec; ++k) chunk_max = acc_max(chunk_max, x[l][k]);
            }
            const A m_new = acc_max(m, chunk_max);
            s *= m == m_new ? A(1) : exp_diff(m, m_new);  // exp(-inf - -inf) would be NaN
            // While the max is still -inf, subtract 0 instead: -inf then adds exp(-inf) = 0,
            // and NaN still poisons s, as it must.
            const A shift = m_new == -A(INFINITY) ? A(0) : m_new;
#pragma unroll
            for (int l = 0; l < kStreamLoads; ++l)
#pragma unroll
                for (int k = 0; k < kVec; ++k) s += exp_diff(x[l][k], shift);
            m = m_new;
        }
        const A row_m = row_max<kTPR>(m, smem);
        s *= m == row_m ? A(1) : exp_diff(m, row_m);
        A unused = A(0);
        row_sum3<kTPR>(s, sum_x, unused, smoothing, smem);
        const A lse = row_m + acc_log(s);
        if (tid == 0) write_row<T>(a, row, r, lse, xt, sum_x);

        if (a.grad) {  // a second read of the row: it no longer fits anywhere on chip
            const A scale = grad_scale<A>(a, r);
            const A eps = static_cast<A>(a.label_smoothing);
            const A smooth = eps / static_cast<A>(C) * scale;
            const A hit = (A(1) - eps) * scale;
            T* g_row = static_cast<T*>(a.grad) + row * C;
            if (tid < head + tail) {
                const int64_t j = tid < head ? tid : head + nvec * kVec + (tid - head);
                A g = exp_diff(to_acc(x_row[j]), lse) * scale - smooth;
                if (j == r.t) g -= hit;
                g_row[j] = from_acc<T>(g);
            }
            Vec<T, kVec>* g_vec = reinterpret_cast<Vec<T, kVec>*>(g_row + head);
            for (int64_t v = tid; v < nvec; v += kTPR) {
                const Vec<T, kVec> in = v_row[v];
                Vec<T, kVec> out;
#pragma unroll
                for (int k = 0; k < kVec; ++k) {
                    A g = exp_diff(to_acc(in.v[k]), lse) * scale - smooth;
                    if (head + v * kVec + k == r.t) g -= hit;
                    out.v[k] = from_acc<T>(g);
                }
                g_vec[v] = out;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers: the launch policy (threads per row by row length), then the ops.

// kTPR threads per row, each holding kLoads vectors of kVec values in registers.
template <class T, int kTPR, int kVec, int kLoads>
static void launch_cached(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    const unsigned blocks = row_grid(ceil_div(a->rows, kBlock / kTPR));
    row_cached<T, kTPR, kVec, kLoads><<<blocks, kBlock, 0, stream>>>(*a);
}

// The fewest threads per row, 1, 2, 4, ... up to a warp, that hold the row at 32 values each.
template <class T, int kTPR = 1>
static void launch_fitted(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    if constexpr (kTPR < 32) {
        if (a->classes > 32 * kTPR) return launch_fitted<T, 2 * kTPR>(a, stream);
    }
    launch_cached<T, kTPR, kVec, 32 / kVec>(a, stream);
}

// Rows that fit in registers get 32 values per thread (16 when read one by one), and as few
// threads per row as hold them: short rows share a warp, so that every thread has all its
// loads in flight and a row's reductions take few shuffles. (A warp per row of 10 classes kept
// 40 bytes in flight per warp: 83 GB/s on the H100; a thread per row: 2 TB/s.)
template <class T>
static void launch_rows(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    constexpr int kLoads = 32 / kVec;  // 32 values per thread
    const int64_t C = a->classes;
    if constexpr (sizeof(T) == 8) {  // fp64 exists for gradcheck: one simple path
        row_streaming<T, 1><<<row_grid(a->rows), kStreamThreads, 0, stream>>>(*a);
    } else if (C % kVec == 0 && C <= 32 * 32) {
        launch_fitted<T>(a, stream);
    } else if (C % kVec == 0 && C <= 128 * 32) {
        launch_cached<T, 128, kVec, kLoads>(a, stream);
    } else if (C <= kShortLoads) {  // rows of any length, read one value at a time
        launch_cached<T, 1, 1, kShortLoads>(a, stream);
    } else if (C <= 32 * kShortLoads) {
        launch_cached<T, 32, 1, kShortLoads>(a, stream);
    } else {  // long rows, or rows longer than 512 not a multiple of kVec
        row_streaming<T, kVec><<<row_grid(a->rows), kStreamThreads, 0, stream>>>(*a);
    }
}

template <class T>
static cudaError_t forward(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->grad && a->reduction == REDUCTION_NONE) return cudaErrorNotSupported;  // use lse
    if (!is_aligned16(a->logits) || (a->grad && !is_aligned16(a->grad)))
        return cudaErrorMisalignedAddress;  // the binding hands over 16-byte aligned tensors
    using A = typename AccOf<T>::type;
    if (a->grad && a->reduction == REDUCTION_MEAN)
        gradient_factor<A><<<1, kCountThreads, 0, stream>>>(*a);
    launch_rows<T>(a, stream);
    return finish_losses<T, A>(a, stream);
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    return by_logits_dtype(a->logits_dtype, [&](auto t) { return forward<decltype(t)>(a, s); });
}

extern "C" cudaError_t cross_entropy_scale_grad_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    return by_logits_dtype(a->logits_dtype,
                           [&](auto t) { return launch_scale_grad<decltype(t)>(a, s); });
}

extern "C" cudaError_t cross_entropy_backward_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    return by_logits_dtype(a->logits_dtype,
                           [&](auto t) { return launch_backward_from_lse<decltype(t)>(a, s); });
}
