// Chapter 5, step 4: as few threads per row as hold it.
//
// Fixes (vs step 3): a block of 256 threads per row leaves most of them idle on short rows: a
// row of 10 classes keeps 10 threads busy and pays two block reductions (__syncthreads) for 10
// values (on the H100, rows of 10 classes read at 7 GB/s with a block each, about 2 TB/s with a
// thread each). Here a row gets the fewest threads that hold it at 32 values each: 1, 2, 4, 8,
// 16 or 32 threads up to 1024 classes, several rows in a block of 256 (their reductions are a
// few shuffles, no __syncthreads); longer rows keep step 3's block of 256. The loop over a row
// is step 3's.
// Still slow: one 4-byte load per thread at a time keeps few bytes in flight (step 5), and
// expf costs about eight instructions, twice per value (steps 5 and 6). fp32, forward only.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ce_finish.cuh"  // finish_losses: the fixed-order float64 sum of the rows' losses
#include "ce_rows.cuh"    // row_max, row_sum3, read_target, write_row, row_grid

constexpr int kGroupThreads = 256;   // block size when a row takes 32 threads or fewer
constexpr int kStreamThreads = 256;  // block size of rows longer than 1024 classes (step 3's)

// kTPR threads per row (up to 32: part of a warp, several rows per block; else the block).
template <int kTPR>
__global__ void __launch_bounds__(kTPR > 32 ? kTPR : kGroupThreads)
row_streaming(CrossEntropyArgs a) {
    let_next_kernel_start();  // the end may be scheduled (common/dependent_launch.cuh)
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    constexpr int kRowsPerBlock = kBlock / kTPR;
    __shared__ float smem[3 * (kTPR > 32 ? kTPR / 32 : 1)];
    const int tid = threadIdx.x % kTPR;
    const int64_t C = a.classes;

    // The loop runs the same number of times in every thread of the block: the shuffles of a
    // group need the whole warp, so threads past the last row compute on -inf and store nothing.
    for (int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; first < a.rows;
         first += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
        const int64_t row = first + threadIdx.x / kTPR;
        const bool valid = kRowsPerBlock == 1 || row < a.rows;  // a block per row: always
        const float* x = static_cast<const float*>(a.logits) + row * C;
        const RowTarget r = valid ? read_target(a, row) : RowTarget{0, true, false};
        const float xt = tid == 0 && !r.ignored && !r.bad ? x[r.t] : 0.0f;

        float m = -INFINITY, s = 0.0f;
        for (int64_t j = valid ? tid : C; j < C; j += kTPR) {
            const float v = x[j];
            if (v == -INFINITY) continue;  // adds 0; and exp(-inf - -inf) would be NaN
            const float m_new = fmaxf(m, v);  // drops NaN, but exp(NaN - m) poisons s, as it must
            s = s * expf(m - m_new) + expf(v - m_new);
            m = m_new;
        }
        const float row_m = row_max<kTPR>(m, smem);
        s *= m == row_m ? 1.0f : expf(m - row_m);
        float unused = 0.0f, unused_too = 0.0f;
        row_sum3<kTPR>(s, unused, unused_too, false, smem);
        if (tid == 0 && valid) write_row<float>(a, row, r, row_m + logf(s), xt, 0.0f);
    }
}

// kTPR threads per row: a block of them, or several rows in a block of kGroupThreads.
template <int kTPR>
static void launch_group(const CrossEntropyArgs* a, cudaStream_t stream) {
    constexpr int kBlock = kTPR > 32 ? kTPR : kGroupThreads;
    const unsigned blocks = row_grid(ceil_div(a->rows, kBlock / kTPR));
    row_streaming<kTPR><<<blocks, kBlock, 0, stream>>>(*a);
}

// The fewest threads per row, 1, 2, 4, ... up to a warp, that hold the row at 32 values each.
template <int kTPR = 1>
static void launch_fitted(const CrossEntropyArgs* a, cudaStream_t stream) {
    if constexpr (kTPR < 32) {
        if (a->classes > 32 * kTPR) return launch_fitted<2 * kTPR>(a, stream);
    }
    launch_group<kTPR>(a, stream);
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->logits_dtype != LOGITS_F32 || a->grad || a->lse || a->label_smoothing != 0.0f)
        return cudaErrorNotSupported;  // the last step has the rest
    if (a->classes <= 32 * 32) {
        launch_fitted(a, stream);
    } else {  // long rows: a block each
        launch_group<kStreamThreads>(a, stream);
    }
    return finish_losses<float, float>(a, stream);
}
