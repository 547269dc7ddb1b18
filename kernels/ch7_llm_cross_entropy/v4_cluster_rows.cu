// Chapter 7, version 4: cross-entropy over LLM vocabularies, one row per thread-block cluster.
//
// Fixes (vs chapter 5's version 3): a row of 128256 bf16 logits is 256 KB, more than one SM
// holds, so version 3 streams it (online softmax) and reads it a second time for the gradient.
// Here the row is split over a cluster of up to 16 blocks, on up to 16 SMs, and stays on chip:
// - each block copies its slice of the row (about 32 KB) into its shared memory with cp.async:
//   every copy in flight at once, and no registers held, so 7 blocks fit on an SM;
// - each block computes its slice's max and sum of exp(x - that max) (and the target's logit and
//   the sum of the logits for label smoothing) and leaves them in its shared memory; after one
//   cluster barrier every warp reads the n blocks' values through distributed shared memory
//   (DSMEM: another SM's shared memory, mapped by cluster.map_shared_rank) and combines them as
//   the online softmax does: m = max of the maxima, s = sum of s_b exp(m_b - m). Every block
//   adds the same values in the same order, so every block gets the same log-sum-exp, bit for bit
//   (a first form exchanged the max, then the sums: two barriers; 1.64 vs 1.60 ms in fp32);
// - each block writes the gradient of its slice from shared memory (exp computed a second time:
//   cheaper than keeping 32 KB of fp32 exponentials).
// Forward and backward thus read the logits once and write the gradient once: the bound.
// The cluster size grows with the row: n = ceil(row bytes / 32 KB), at most 16 (8 is the portable
// limit; 16 is allowed on the H100 with cudaFuncAttributeNonPortableClusterSizeAllowed), slices up
// to 112 KB; rows of 4097 classes up to 16 x 112 KB, when their length is a multiple of 16 bytes.
// Everything else is version 3: shorter rows (one block's registers hold them), longer or oddly
// sized rows (streaming), fp64, GPUs before Hopper (clusters are sm_90 hardware), the forward
// alone when a row needs more than one block, and the count, final sum and backward kernels.
// Block size: 128 threads for every dtype, 32 KB slices (7 blocks per SM by shared memory):
// 16 copies of 16 bytes in flight per thread. With 256 threads bf16 ran at 1.80 ms for
// 8192 x 128256 (DRAM ~70% of peak, 6 blocks per SM) against 1.60 ms with 128: more, smaller
// blocks keep more SMs copying while others compute between the cluster barriers. Tried and
// dropped (bench/PERFLOG.md): a persistent cluster (as many as fit, each looping over rows,
// copying the next row's slice into a second buffer while it computes this one; 3 blocks per
// SM: 2.13 vs 1.81 ms in bf16), exp(x - max) kept in shared memory for the gradient, the exp's
// scale folded into one FFMA (both within 2%), 64 threads per block (1.69 ms).
//
// How the file is built: it includes version 3's file, which the loader splices in as text
// (kernels/codegen.py). Version 3's launch_rows is renamed launch_rows_v3 by the macro below, so
// that version 3's forward() calls the launch_rows of this file, which falls back to it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "compiled_arch.cuh"
#include "loss_args.h"

namespace cg = cooperative_groups;

template <class T> static void launch_rows(const CrossEntropyArgs* a, cudaStream_t stream);
#define launch_rows(args, stream) launch_rows_v3(args, stream)  // renames v3's definition only
#include "../ch5_cross_entropy/v3_fused_rows.cu"
#undef launch_rows

constexpr int kClusterThreads = 128;  // threads per block, for every dtype (see the header)
constexpr int kMaxCluster = 16;
constexpr int64_t kSliceBytes = 32 * 1024;      // a block's part of a row, when the row allows
constexpr int64_t kMaxSliceBytes = 112 * 1024;  // the most (rows of 16 slices and more)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // device code for Hopper and later only
// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80+):
// every copy of a block is in flight at once, and the registers stay free for more blocks.
__device__ __forceinline__ void copy_async16(void* shared, const void* global) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global));
}
__device__ __forceinline__ void copies_done() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#endif

template <class T>
__global__ void __launch_bounds__(kClusterThreads) row_cluster(CrossEntropyArgs a,
                                                               int64_t vecs_per_block) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    let_next_kernel_start();  // the final kernels may be scheduled (common/dependent_launch.cuh)
    using A = float;
    constexpr int kVec = 16 / sizeof(T);
    using V = Vec<T, kVec>;
    extern __shared__ uint4 slice_bytes[];  // this block's part of the row (one extern array
    V* slice = reinterpret_cast<V*>(slice_bytes);  // for every T: its type cannot vary)
    __shared__ A smem[3 * kClusterThreads / 32];  // the block's reductions (version 3's)
    __shared__ A shared[4];  // what peers read: max, sum of exp, target logit, sum of logits
    cg::cluster_group cluster = cg::this_cluster();
    const int n = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int64_t row = blockIdx.x / n;
    const int64_t C = a.classes;
    const int64_t first = rank * vecs_per_block;  // this block's vectors of the row
    const int count = static_cast<int>(min(C / kVec, first + vecs_per_block) - first);
    const V* x_row = reinterpret_cast<const V*>(static_cast<const T*>(a.logits) + row * C) + first;
    for (int v = threadIdx.x; v < count; v += kClusterThreads) copy_async16(&slice[v], &x_row[v]);
    const RowTarget r = read_target(a, row);
    const bool smoothing = a.label_smoothing != 0.0;
    // The target's logit, fetched by one thread of the cluster while the row is on its way.
    A xt = A(0);
    if (rank == 0 && threadIdx.x == 0 && !r.ignored && !r.bad)
        xt = to_acc(static_cast<const T*>(a.logits)[row * C + r.t]);
    copies_done();
    __syncthreads();

    A m = -A(INFINITY);
    for (int v = threadIdx.x; v < count; v += kClusterThreads) {
        const V in = slice[v];
#pragma unroll
        for (int k = 0; k < kVec; ++k) m = acc_max(m, to_acc(in.v[k]));
    }
    m = row_max<kClusterThreads>(m, smem);  // this block's max: the cluster's comes later
    // A slice that is all -inf (masked classes) shifts by 0: exp(-inf) = 0, not exp(NaN).
    const A shift = m == -A(INFINITY) ? A(0) : m;

    A s = A(0), sum_x = A(0);
    for (int v = threadIdx.x; v < count; v += kClusterThreads) {
        const V in = slice[v];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
            const A x = to_acc(in.v[k]);
            if (smoothing) sum_x += x;
            s += exp_diff(x, shift);
        }
    }
    row_sum3<kClusterThreads>(s, sum_x, xt, smoothing, smem);
    if (n > 1) {  // one exchange: each block's (max, sum of exp(x - its max), ...)
        if (threadIdx.x == 0) {
            shared[0] = shift;
            shared[1] = s;
            shared[2] = xt;
            shared[3] = sum_x;
        }
        cluster.sync();
        const int lane = threadIdx.x % 32;
        A peer_m = -A(INFINITY), peer_s = A(0), peer_xt = A(0), peer_sum = A(0);
        if (lane < n) {
            const A* peer = cluster.map_shared_rank(shared, lane);
            peer_m = peer[0];
            peer_s = peer[1];
            peer_xt = peer[2];
            peer_sum = peer[3];
        }
        m = warp_max(lane < n ? peer_m : -A(INFINITY));
        // Rescale each block's sum to the row's max (online softmax across blocks).
        s = warp_sum(peer_s == A(0) ? A(0) : peer_s * exp_diff(peer_m, m));
        xt = warp_sum(peer_xt);
        if (smoothing) sum_x = warp_sum(peer_sum);
        // Peers may still read this block's partial sums: it must not exit before they are
        // done. Arrive now, wait at the end, so that the gradient's stores overlap the barrier.
        cluster.barrier_arrive();
    } else {
        m = shift;
    }
    const A lse = m + acc_log(s);
    if (rank == 0 && threadIdx.x == 0) write_row<T>(a, row, r, lse, xt, sum_x);

    if (a.grad) {  // from the slice in shared memory: no second read of the logits
        const A scale = grad_scale<A>(a, r);
        const A p_scale = scale / s;  // softmax_j * scale = exp(x_j - m) * scale / s
        const A eps = static_cast<A>(a.label_smoothing);
        const A smooth = eps / static_cast<A>(C) * scale;
        const A hit = (A(1) - eps) * scale;
        // The target's place in this slice, if it is here: vector t_v, element t_k.
        const int64_t t_here = r.ignored || r.bad ? -1 : r.t - first * kVec;
        const int64_t t_v = t_here >= 0 ? t_here / kVec : -1;
        const int t_k = static_cast<int>(t_here % kVec);
        V* g_row = reinterpret_cast<V*>(static_cast<T*>(a.grad) + row * C) + first;
        for (int v = threadIdx.x; v < count; v += kClusterThreads) {
            const V in = slice[v];
            V out;
#pragma unroll
            for (int k = 0; k < kVec; ++k)
                out.v[k] = from_acc<T>(exp_diff(to_acc(in.v[k]), m) * p_scale - smooth);
            g_row[v] = out;
        }
        // The target's element, stored again with -hit by the thread that stored its vector (a
        // thread's second store to an address lands after its first). Tested per element in the
        // loop, the target cost bf16 a fifth of the loop's instructions (bench/PERFLOG.md).
        if (t_v >= 0 && t_v < count && t_v % kClusterThreads == threadIdx.x) {
            const T x_t = reinterpret_cast<const T*>(&slice[t_v])[t_k];
            const A g = exp_diff(to_acc(x_t), m) * p_scale - smooth - hit;
            reinterpret_cast<T*>(&g_row[t_v])[t_k] = from_acc<T>(g);
        }
    }
    if (n > 1) cluster.barrier_wait();
#endif
}

// A cluster of n blocks per row, when this kernel serves the row (see the header); false leaves
// the rows to version 3.
template <class T>
static bool launch_cluster(const CrossEntropyArgs* a, cudaStream_t stream) {
    if constexpr (sizeof(T) == 8) {
        return false;
    } else {
        constexpr int kVec = 16 / sizeof(T);
        const int64_t C = a->classes;
        const int64_t bytes = C * static_cast<int64_t>(sizeof(T));
        if (C <= 4096 || C % kVec != 0) return false;
        const int64_t n = min(ceil_div(bytes, kSliceBytes), static_cast<int64_t>(kMaxCluster));
        const int64_t vecs_per_block = ceil_div(C / kVec, n);  // the row split evenly
        const int64_t slice_bytes = vecs_per_block * 16;
        if (slice_bytes > kMaxSliceBytes || a->rows * n > INT32_MAX) return false;
        // Without a gradient to write, nothing needs the row on chip: version 3 streams rows
        // longer than one block's slice faster (no cluster barriers; bench/PERFLOG.md).
        if (!a->grad && n > 1) return false;
        // Asked once: built for Hopper or later (a build for older GPUs has an empty row_cluster,
        // see above), 16-block clusters, shared memory past 48 KB.
        static const bool ready =
            compiled_arch(row_cluster<T>) >= 90 &&
            cudaFuncSetAttribute(row_cluster<T>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                                 1) == cudaSuccess &&
            cudaFuncSetAttribute(row_cluster<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kMaxSliceBytes)) == cudaSuccess;
        if (!ready) return false;
        cudaLaunchAttribute cluster_dim{};
        cluster_dim.id = cudaLaunchAttributeClusterDimension;
        cluster_dim.val.clusterDim.x = static_cast<unsigned>(n);
        cluster_dim.val.clusterDim.y = 1;
        cluster_dim.val.clusterDim.z = 1;
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(static_cast<unsigned>(a->rows * n));
        config.blockDim = dim3(kClusterThreads);
        config.dynamicSmemBytes = static_cast<size_t>(slice_bytes);
        config.stream = stream;
        config.attrs = &cluster_dim;
        config.numAttrs = 1;
        cudaLaunchKernelEx(&config, row_cluster<T>, *a, vecs_per_block);
        return true;
    }
}

template <class T> static void launch_rows(const CrossEntropyArgs* a, cudaStream_t stream) {
    if (!launch_cluster<T>(a, stream)) launch_rows_v3<T>(a, stream);
}

// The fused linear + cross-entropy (kernels/llm_head.py) has its gradient written over the
// logits, a scratch chunk whose memory it reuses: every kernel above reads its values of a row
// before it writes the gradient there (the binding passes grad = logits).
extern "C" cudaError_t cross_entropy_into_logits_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    return cross_entropy_launch(a, s);
}
