// Chapter 5, step 6: exp as one MUFU.EX2 instruction.
//
// Fixes (vs step 5): expf is about eight instructions (a range reduction, then the hardware's
// 2^x). exp(x - m) is one subtraction, one multiplication by log2(e) and one ex2.approx
// (exp_diff, common/numerics.cuh): x - m is exact near the max, and results below 2^-126 flush
// to 0, which changes no sum. A row then costs fewer instructions per byte read, which decides
// the speed once the loads are wide (and in bf16, step 11, twice the values per byte).
// Still slow: every row streams: rows that would fit in registers still rescale their running
// sum per chunk and read their chunks one after the other (step 7). fp32, forward only.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ce_finish.cuh"    // finish_losses: the fixed-order float64 sum of the rows' losses
#include "ce_rows.cuh"      // row_max, row_sum3, read_target, write_row, row_grid

// The logits in memory (T) and the arithmetic (A) are fp32 until step 11, which makes T a
// template argument (common/numerics.cuh: to_acc, from_acc, Vec).
using T = float;
using A = float;

constexpr int kGroupThreads = 256;   // block size when a row takes 32 threads or fewer
constexpr int kStreamThreads = 256;  // block size of rows longer than 1024 classes (step 3's)
constexpr int kStreamLoads = 4;      // vectors in flight per thread

// kTPR threads per row (up to 32: part of a warp, several rows per block; else the block),
// online softmax (a running max and a sum rescaled whenever the max grows), kStreamLoads
// vectors in flight per thread. When kVec does not divide
// the row length, rows start off a 16-byte boundary: a few scalars before the first vector (head)
// and after the last (tail) are read one by one, the rest as vectors. The logits' base address
// is 16-byte aligned (the binding copies it otherwise).
template <int kTPR, int kVec>
__global__ void __launch_bounds__(kTPR > 32 ? kTPR : kGroupThreads)
row_streaming(CrossEntropyArgs a) {
    let_next_kernel_start();
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    constexpr int kRowsPerBlock = kBlock / kTPR;
    __shared__ A smem[3 * (kTPR > 32 ? kTPR / 32 : 1)];
    const int tid = threadIdx.x % kTPR;
    const int64_t C = a.classes;

    // The loop runs the same number of times in every thread of the block: the shuffles of a
    // group need the whole warp, so threads past the last row compute on -inf and store nothing.
    for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; first < a.rows;
         first += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
        const int64_t row = first + threadIdx.x / kTPR;
        const bool valid = kRowsPerBlock == 1 || row < a.rows;  // a block per row: always
        const T* x_row = static_cast<const T*>(a.logits) + row * C;
        const int64_t misaligned = (row * C) % kVec;
        const int64_t head = misaligned == 0 ? 0 : (kVec - misaligned < C ? kVec - misaligned : C);
        const int64_t nvec = (C - head) / kVec;
        const int64_t tail = C - head - nvec * kVec;  // < kVec
        const int64_t scalars = valid ? head + tail : 0, vectors = valid ? nvec : 0;
        const Vec<T, kVec>* v_row = reinterpret_cast<const Vec<T, kVec>*>(x_row + head);
        const RowTarget r = valid ? read_target(a, row) : RowTarget{0, true, false};
        // The target's logit, fetched while the row is still on its way.
        A xt = A(0);
        if (tid == 0 && !r.ignored && !r.bad) xt = to_acc(x_row[r.t]);

        // The scalars start the running (max, sum); a row of fewer threads than scalars gives
        // a thread several. A NaN is dropped by the max but poisons s: the loss is NaN.
        A m = -A(INFINITY), s = A(0), sum_x = A(0);
        for (int64_t i = tid; i < scalars; i += kTPR)
            m = acc_max(m, to_acc(x_row[i < head ? i : head + nvec * kVec + (i - head)]));
        for (int64_t i = tid; i < scalars; i += kTPR) {
            const A x = to_acc(x_row[i < head ? i : head + nvec * kVec + (i - head)]);
            s += x == -A(INFINITY) ? A(0) : exp_diff(x, m);  // exp(-inf - -inf) would be NaN
        }
        for (int64_t base = 0; base < vectors; base += kTPR * kStreamLoads) {
            A x[kStreamLoads][kVec];
            A chunk_max = -A(INFINITY);
#pragma unroll
            for (int l = 0; l < kStreamLoads; ++l) {
                const int64_t v = base + l * kTPR + tid;
                if (v < vectors) {
                    const Vec<T, kVec> in = v_row[v];
#pragma unroll
                    for (int k = 0; k < kVec; ++k) {
                        x[l][k] = to_acc(in.v[k]);
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
        row_sum3<kTPR>(s, sum_x, unused, false, smem);
        const A lse = row_m + acc_log(s);
        if (tid == 0 && valid) write_row<T>(a, row, r, lse, xt, sum_x);
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers: the launch policy (threads per row by row length), then the op.

// kTPR threads per row: a block of them, or several rows in a block of kGroupThreads.
template <int kTPR>
static void launch_group(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    constexpr int kVec = 16 / sizeof(T);
    const unsigned blocks = row_grid(ceil_div(a->rows, kBlock / kTPR));
    row_streaming<kTPR, kVec><<<blocks, kBlock, 0, stream>>>(*a);
}

// The fewest threads per row, 1, 2, 4, ... up to a warp, that hold the row at 32 values each.
template <int kTPR = 1>
static void launch_fitted(const CrossEntropyArgs* a, cudaStream_t stream) {
    if constexpr (kTPR < 32) {
        if (a->classes > 32 * kTPR) return launch_fitted<2 * kTPR>(a, stream);
    }
    launch_group<kTPR>(a, stream);
}

static void launch_rows(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->classes <= 32 * 32) {
        launch_fitted(a, stream);
    } else {  // long rows: a block each
        launch_group<kStreamThreads>(a, stream);
    }
}

static cudaError_t forward(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->grad || a->lse || a->label_smoothing != 0.0) return cudaErrorNotSupported;  // 8-10
    if (!is_aligned16(a->logits))
        return cudaErrorMisalignedAddress;  // the binding hands over 16-byte aligned tensors
    launch_rows(a, stream);
    return finish_losses<T, A>(a, stream);
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    if (a->logits_dtype != LOGITS_F32) return cudaErrorNotSupported;  // fp32 until step 11
    return forward(a, s);
}
