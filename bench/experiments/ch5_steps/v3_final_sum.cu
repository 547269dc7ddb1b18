// Chapter 5, step 3: the rows' losses summed without reading the targets again.
//
// Fixes (vs version 2): version 2's final kernel is one block that reads every row's loss and
// target, one at a time, to add the losses and count the rows not ignored. Here the row kernel
// writes what the end needs: an ignored row's loss is -0.0 (a valid row's is >= +0), so the
// sign bits give the count. The end (common/ce_finish.cuh) adds the losses in float64 in a fixed
// order with 16-byte loads, many blocks beyond 16384 rows, and from sm_90 it is queued as a
// dependent launch that starts while the rows' last blocks run. A bad target now stops the row
// kernel with a device-side assertion, as PyTorch does (common/ce_rows.cuh's write_row).
// Still slow: the row kernel is version 2's (4-byte loads, two expf per logit, 256 threads per
// row whatever its length). fp32, forward only.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ce_finish.cuh"  // finish_losses: the fixed-order float64 sum of the rows' losses
#include "ce_rows.cuh"    // read_target, write_row
#include "cuda_utils.cuh"
#include "loss_args.h"
#include "reduce.cuh"  // block_max_all, block_sum_all: the result in every thread

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) row_streaming(CrossEntropyArgs a) {
    let_next_kernel_start();  // the end may be scheduled (common/dependent_launch.cuh)
    const int64_t C = a.classes;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const float* x = static_cast<const float*>(a.logits) + row * C;
        const RowTarget r = read_target(a, row);
        const float xt = threadIdx.x == 0 && !r.ignored && !r.bad ? x[r.t] : 0.0f;

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
        if (threadIdx.x == 0) write_row<float>(a, row, r, row_m + logf(s), xt, 0.0f);
    }
}

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->logits_dtype != LOGITS_F32 || a->grad || a->lse || a->label_smoothing != 0.0f)
        return cudaErrorNotSupported;  // the last step has the rest
    const unsigned blocks = static_cast<unsigned>(a->rows < (1LL << 30) ? a->rows : (1LL << 30));
    row_streaming<<<blocks, kThreads, 0, stream>>>(*a);
    return finish_losses<float, float>(a, stream);
}
