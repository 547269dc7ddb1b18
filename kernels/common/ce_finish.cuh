// Chapter 5's cross-entropy, the end of the forward: the 0-d result (mean or sum) from the rows'
// losses that write_row (ce_rows.cuh) left in the workspace. Why a header: every kernel version
// from the final sum on ends the same way (bench/experiments/ch5_steps), and it is plumbing, not
// the lesson of any one version. The rows' losses are added in float64 in a fixed order, and the
// rows whose loss is -0.0 (ignored) are counted for the mean's divisor (0/0 = NaN: PyTorch's
// answer when every row is ignored): no targets read again (version 1's final kernel read losses
// and targets one at a time: 9.7 us at 32768 rows). Up to kOneBlockRows rows, one block does it
// all; beyond, sum_chunks gives one (sum, ignored count) per chunk of kFinishChunk rows, many
// blocks at once, and finish adds the chunks' results (one block took 1.2 ms for 13M rows of 10
// classes). The second step cost more than it saved up to 16384 rows (1.3-1.6 us more from 8192
// rows, against one block's 4 loads per thread) and saved 1.7 us at 32768 rows. From sm_90 the
// two kernels are programmatic dependent launches (dependent_launch.cuh): they start while the
// rows' last blocks run and wait for them on the device.
#pragma once
#include "ce_rows.cuh"

constexpr int kCountThreads = 1024;                   // the one-block kernels: count, final sum
constexpr int kOneBlockLoads = 4;                     // 16-byte loads per thread, one block
constexpr int64_t kFinishChunk = 4 * kCountThreads;  // a chunk: one float4 per thread, 4096
constexpr int64_t kOneBlockRows = kOneBlockLoads * kFinishChunk;  // 16384

// The block's threads' (acc, ignored) added in a fixed tree; the totals reach thread 0.
__device__ void block_total(double& acc, long long& ignored) {
    __shared__ double sums[kCountThreads / 32];
    __shared__ long long counts[kCountThreads / 32];
    acc = warp_sum(acc);
    for (int o = 16; o > 0; o >>= 1) ignored += __shfl_xor_sync(0xffffffffu, ignored, o);
    if (threadIdx.x % 32 == 0) {
        sums[threadIdx.x / 32] = acc;
        counts[threadIdx.x / 32] = ignored;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kCountThreads / 32; ++w) {  // (lane 0 holds w = 0)
            acc += sums[w];
            ignored += counts[w];
        }
    }
}

// Thread i adds the 16-byte vectors i, i + 1024, ... of losses[begin, end), a range of at most
// kLoads * kFinishChunk losses (kLoads loads in flight), then the warps' sums are added in a
// fixed tree: the result reaches thread 0.
template <int kLoads, class A>
__device__ void sum_range(const A* losses, int64_t begin, int64_t end, double& acc,
                          long long& ignored) {
    acc = 0.0;
    ignored = 0;
    int64_t scalars_from = begin;
    if constexpr (sizeof(A) == 4) {  // begin is a multiple of 4: 16-byte aligned
        const float4* v = reinterpret_cast<const float4*>(losses + begin);
        const int64_t nvec = (end - begin) / 4;  // <= kLoads * kCountThreads
        float4 x[kLoads];
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            const int64_t i = l * kCountThreads + threadIdx.x;
            x[l] = i < nvec ? v[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int l = 0; l < kLoads; ++l) {
            acc += (static_cast<double>(x[l].x) + x[l].y) + (static_cast<double>(x[l].z) + x[l].w);
            ignored += signbit(x[l].x) + signbit(x[l].y) + signbit(x[l].z) + signbit(x[l].w);
        }
        scalars_from = begin + 4 * nvec;
    }
    for (int64_t i = scalars_from + threadIdx.x; i < end; i += kCountThreads) {
        acc += static_cast<double>(losses[i]);
        ignored += signbit(losses[i]);
    }
    block_total(acc, ignored);
}

// Where sum_chunks leaves its results: after the losses, 8-byte aligned.
template <class A> __device__ __forceinline__ double* chunk_sums(const CrossEntropyArgs& a) {
    return reinterpret_cast<double*>(row_losses<A>(a) + (a.rows + 1) / 2 * 2);
}

template <class A>
__global__ void __launch_bounds__(kCountThreads) sum_chunks(CrossEntropyArgs a) {
    wait_for_previous_kernel();
    let_next_kernel_start();
    const int64_t begin = blockIdx.x * kFinishChunk;
    const int64_t end = begin + kFinishChunk < a.rows ? begin + kFinishChunk : a.rows;
    double acc;
    long long ignored;
    sum_range<1>(row_losses<A>(a), begin, end, acc, ignored);
    if (threadIdx.x == 0) {
        double* sums = chunk_sums<A>(a);
        sums[blockIdx.x] = acc;
        reinterpret_cast<long long*>(sums + gridDim.x)[blockIdx.x] = ignored;
    }
}

template <class T, class A>
__global__ void __launch_bounds__(kCountThreads) finish(CrossEntropyArgs a) {
    wait_for_previous_kernel();
    double acc = 0.0;
    long long ignored = 0;
    if (a.rows <= kOneBlockRows) {
        sum_range<kOneBlockLoads>(row_losses<A>(a), 0, a.rows, acc, ignored);
    } else {  // the chunks' results: thread i adds chunks i, i + 1024, ..., then the tree
        const int64_t chunks = (a.rows + kFinishChunk - 1) / kFinishChunk;
        const double* sums = chunk_sums<A>(a);
        const long long* counts = reinterpret_cast<const long long*>(sums + chunks);
        for (int64_t c = threadIdx.x; c < chunks; c += kCountThreads) {
            acc += sums[c];
            ignored += counts[c];
        }
        block_total(acc, ignored);
    }
    if (threadIdx.x == 0) {
        if (a.reduction == REDUCTION_MEAN) acc /= static_cast<double>(a.rows - ignored);
        *static_cast<T*>(a.out) = from_acc<T>(static_cast<A>(acc));
    }
}

// After the row kernel: nothing for reduction "none" (the rows wrote their losses), else the
// final kernels, queued to start while the rows' last blocks run.
template <class T, class A>
static cudaError_t finish_losses(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (a->reduction == REDUCTION_NONE) return cudaGetLastError();
    if (a->rows > kOneBlockRows) {
        const unsigned chunks = static_cast<unsigned>(ceil_div(a->rows, kFinishChunk));
        const cudaError_t err =
            launch_dependent<sum_chunks<A>>(dim3(chunks), dim3(kCountThreads), stream, *a);
        if (err != cudaSuccess) return err;
    }
    const cudaError_t err =
        launch_dependent<finish<T, A>>(dim3(1), dim3(kCountThreads), stream, *a);
    return err != cudaSuccess ? err : cudaGetLastError();
}
