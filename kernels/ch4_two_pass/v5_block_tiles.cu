// Chapter 4, version 5: the grid torch.compile chose: a block per tile, as many blocks as tiles.
//
// Fixes (vs versions 2 and 3): at 2^30 elements they read 1-2% slower than torch.compile. Its
// generated code (torch._inductor.utils.run_and_get_code, shown in the chapter) launches 8192
// programs of 512 threads, each summing 131072 consecutive elements, then one more program for
// the 8192 partials. Three differences from version 2, each copied here:
//  - a tile belongs to a whole block, not to a warp: the block's 512 threads read it together,
//    thread i taking float4 number i, i + 512, ... of each step (two per input in flight);
//  - the grid has one block per tile, not the resident grid: the hardware hands a new tile to
//    an SM as soon as one finishes, so no SM idles at the end waiting for a slow neighbour (a
//    resident grid gives every warp a fixed list of tiles);
//  - fewer registers per thread (40 instead of 44), so more threads per SM (ncu: version 3 ran
//    5 blocks of 256 threads per SM, 62% of the warps the SM can hold).
// The sum order is still fixed by n alone: tile size from n, a fixed order inside each tile
// (thread, then the block's tree), pass 2 in float64 in a fixed order. Any grid gives the same
// bits (LOSS_KERNELS_BLOCKS caps it: blocks then loop over tiles).
// Also new: up to kOneBlockMax elements, one block of 1024 threads reads everything and writes
// the mean: no partials in memory, no second launch (at 2^12 elements version 3's kernel took
// 4.3 µs, torch.compile's single program 1.8 µs). Each thread issues all its loads before any
// arithmetic (one_block_mean_vec): a loop that waited for each vector in turn left 2^13
// elements 6-18% behind torch.compile, two trips to memory instead of one.
// Mid sizes (2^16 to 2^24), where it was 5-18% behind torch.compile, three more changes:
//  - pass 2 is a programmatic dependent launch (sm_90 on): it is queued with permission to
//    start before pass 1 ends, and waits on the device (griddepcontrol.wait) instead of on the
//    stream, so the launch latency of the second kernel hides behind pass 1's last blocks.
//    Pass 2 is narrow: one block of 256 threads, whose calls took 0.1-0.2 µs less than with
//    1024 at 2^16-2^22 elements (widths of 32 to 1024 measured: bench/PERFLOG.md, session 30).
//    It reads the partials with plain loads: a strong load (__ldcg or ld.relaxed.gpu, both
//    LDG.STRONG.GPU in the machine code) made it end 1.1 µs later at 2^16-2^18. Version 3's
//    single launch, whose last block adds the partials, saved the second launch's 0.3 µs
//    outside the kernels and lost as much inside them at 2^16-2^18, and 2.4 µs at 2^22, where
//    1024 blocks each fence and count on one counter;
//  - from 2^21 to 2^26 elements pass 1 reads with evict-first loads (__ldcs), as Inductor's
//    reductions do: lines read once leave L2 first. Larger inputs read plain loads, measured
//    faster there (chapter 4's version 3 found the same). At 2^26 an H200's Hinge pass 1 with
//    plain loads ran 7% behind Inductor's (an H100's was level either way: PERFLOG, session 28);
//  - in that range, a broadcast target (Hinge's row), which stays in the caches, gets tiles
//    twice as long in blocks of 256 threads, so a tile streams as many bytes as a same-shape
//    one, and twice as many blocks share an SM.
// bench/v5_ablation.py rebuilds this file with CLUSTERS, DEPENDENT_LAUNCH or STREAM_LOADS set
// to 0 and times what each buys. For same-shape inputs, tile sizes (4096-16384) and a warp per tile
// changed nothing measurable.
// At 2^12 elements and below the single block has Inductor's shape, 512 threads (its program's
// launch record in the profiler) with two loads per input each: 1024 threads were 4-7% slower
// than Inductor's program there, 512 are 2-5% (bench/PERFLOG.md, 2026-11-26). Up to 2^13 the
// 1024 threads load two vectors per input, not four, so 2^13 fills the copy without checks.
// A broadcast target whose length is a power of two finds its vector by a mask, as Inductor's
// program (its period is a constant) does, instead of a division by the period.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include <cooperative_groups.h>

#include "compiled_arch.cuh"
#include "cuda_utils.cuh"
#include "dependent_launch.cuh"
#include "loss_args.h"
#include "losses.cuh"
#include "reduce.cuh"

#ifndef STREAM_LOADS  // 0: plain loads at every size (bench/v5_ablation.py)
#define STREAM_LOADS 1
#endif
#ifndef CLUSTERS  // 0: two passes above the single block on Hopper too (bench/v5_ablation.py)
#define CLUSTERS 1
#endif

constexpr int kThreads = 512;              // threads per block of pass 1 ...
constexpr int kBroadcastThreads = 256;     // ... for a broadcast target, 2^21 to 2^26
constexpr int kUnroll = 2;                 // 16-byte loads per input per thread per step
constexpr int64_t kMinTile = 4096;         // elements per tile, at least (there: twice)
constexpr int64_t kWantedTiles = 8192;     // tiles double until there are at most this many
constexpr int kFinalThreads = 256;         // pass 2: one block (see "pass 2 is narrow" above)
constexpr int kOneBlockThreads = 1024;     // small inputs: one block, ...
constexpr int kOneBlockUnroll = 4;         // ... 4 loads per input per thread: 2^14 in one step
constexpr int64_t kOneBlockMax = 1 << 14;  // ... up to this many elements (2 loads up to 2^13)
constexpr int kSmallThreads = 512;         // the smallest: one block of 512 threads, ...
constexpr int kSmallUnroll = 2;            // ... 2 loads per input per thread ...
constexpr int64_t kSmallMax = 1 << 12;     // ... up to this many elements
constexpr int kClusterThreads = 1024;      // above, on Hopper: one cluster of blocks of 1024
constexpr int kMaxClusterBlocks = 16;      // threads reads everything in one round: 8 blocks
constexpr int64_t kClusterMax = 1 << 18;   // with 2 or 4 loads per input per thread up to 2^17,
                                           // 16 (a non-portable size) with 4 up to this
static_assert(kOneBlockThreads * kOneBlockUnroll * 4 == kOneBlockMax &&
              kSmallThreads * kSmallUnroll * 4 == kSmallMax &&
              kMaxClusterBlocks * kClusterThreads * 4 * 4 == kClusterMax, "one round reads all");
constexpr int64_t kStreamFrom = 1LL << 21;  // evict-first loads for inputs this large ...
constexpr int64_t kStreamBelow = 1LL << 27; // ... and smaller than this
// Pass 1 asks for registers that let 1536 of its threads share an SM (40 per thread: 3 blocks
// of 512), where an SM holds 1536 threads or more (sm_80 on); a Turing SM (sm_75, Colab's T4)
// holds 1024. Its evict-first copy for same-shape inputs asks for 1024 (64 registers): at 40 it
// spilled 8-28 bytes per thread (`ptxas -v`; __ldcs is inline assembly, which the compiler
// schedules less freely), a few loads and stores of local memory per tile that left Smooth L1
// 7% behind plain loads at 2^22 elements and 11% at 2^24. The broadcast copy does not spill,
// and ran 15-20% slower at 1024 threads per SM (bench/PERFLOG.md, session 25).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TILE_THREADS_PER_SM 512
#define STREAM_TILE_THREADS_PER_SM 512
#else
#define TILE_THREADS_PER_SM 1536
#define STREAM_TILE_THREADS_PER_SM 1024
#endif

// Elements per tile for n inputs, at least min_tile: a function of the shape only, so the sum
// order is fixed by the shape. At most 8192 partials: they fit the workspace
// (LOSS_WORKSPACE_BYTES) and pass 2 reads them fast.
static int64_t tile_size(int64_t n, int64_t min_tile) {
    int64_t tile = min_tile;
    while (ceil_div(n, tile) > kWantedTiles) tile *= 2;
    return tile;
}

// LOSS_KERNELS_BLOCKS=k, read once per process, caps the grid at k blocks: a test knob that
// shows the result does not depend on the grid (bench/reduction_targets.py uses it).
static int64_t grid_cap() {
    static const int64_t cap = [] {
        const char* text = getenv("LOSS_KERNELS_BLOCKS");
        return text ? atoll(text) : 0LL;
    }();
    return cap;
}

template <bool kStream, class T> __device__ __forceinline__ T read(const T* p) {
    return kStream ? __ldcs(p) : *p;
}

// The target vector that pred's vector v meets (a broadcast target of length period, a multiple
// of 4), for the single block and pass 1's tiles alike. The division by the period is a dozen
// dependent instructions (I2F, MUFU.RCP, F2I, IMAD.HI, ...) before a single block's first
// target load: where the period is a power of two, a mask, as in Inductor's program, whose
// period is a constant. At 2^12 and 2^13 elements (periods of 64) the single block's span fell
// 3-5% (bench/PERFLOG.md, session 27).
template <bool kPow2Period>
__device__ __forceinline__ uint32_t broadcast_vector(uint32_t v, uint32_t period) {
    return (kPow2Period ? 4u * v & (period - 1) : 4u * v % period) / 4;
}

// This thread's part of the sum of elements [start, end): float4 number i, i + kBlock, ... of the
// range, in whole steps of kLoads per input (all issued before any arithmetic, no bounds checks),
// then the vectors left one at a time, then the last 0-3 elements. kStream: evict-first loads.
// vector: pred and target are 16-byte aligned, and start is a multiple of 4 (so is a broadcast
// target's length). A broadcast target repeats with period target_len (< 2^31 then), and stays
// in the caches: it is read with __ldg whatever kStream says.
template <class Loss, bool kBroadcast, int kBlock, int kLoads, bool kStream = false>
__device__ float thread_sum(const ReductionArgs& a, int64_t start, int64_t end, bool vector) {
    const Loss loss;
    float acc = 0.0f;
    int64_t scalars_from = start;
    if (vector) {
        const float4* pred = reinterpret_cast<const float4*>(a.pred + start);
        const float4* target = reinterpret_cast<const float4*>(a.target + (kBroadcast ? 0 : start));
        const uint32_t period = static_cast<uint32_t>(a.target_len);
        const uint32_t base = kBroadcast ? static_cast<uint32_t>(start % a.target_len) : 0;
        auto target_at = [&](int v) {  // a broadcast target: 32-bit index arithmetic
            return kBroadcast ? __ldg(target + broadcast_vector<false>(base / 4 + v, period))
                              : read<kStream>(target + v);
        };
        const int nvec = static_cast<int>((end - start) / 4);  // a tile: < 2^31 vectors
        int v = threadIdx.x;
        for (; v + (kLoads - 1) * kBlock < nvec; v += kLoads * kBlock) {
            float4 p[kLoads], t[kLoads];
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {
                p[u] = read<kStream>(pred + v + u * kBlock);
                t[u] = target_at(v + u * kBlock);
            }
#pragma unroll
            for (int u = 0; u < kLoads; ++u)
                acc += (loss(p[u].x, t[u].x) + loss(p[u].y, t[u].y)) +
                       (loss(p[u].z, t[u].z) + loss(p[u].w, t[u].w));
        }
        for (; v < nvec; v += kBlock) {
            const float4 p = read<kStream>(pred + v), t = target_at(v);
            acc += (loss(p.x, t.x) + loss(p.y, t.y)) + (loss(p.z, t.z) + loss(p.w, t.w));
        }
        scalars_from = start + 4 * nvec;
    }
    for (int64_t i = scalars_from + threadIdx.x; i < end; i += kBlock)
        acc += loss(a.pred[i], a.target[kBroadcast ? i % a.target_len : i]);
    return acc;
}

// Pass 1: one float partial per tile, in blocks of kBlock threads.
template <class Loss, bool kBroadcast, bool kStream, int kBlock>
__global__ void __launch_bounds__(kBlock, (kStream && !kBroadcast ? STREAM_TILE_THREADS_PER_SM
                                                                  : TILE_THREADS_PER_SM) / kBlock)
tile_partials(ReductionArgs a, float* partials, int64_t tiles, int64_t tile_elems, bool vector) {
    let_next_kernel_start();  // pass 2 may now be scheduled; it waits for this grid on the device
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t start = tile * tile_elems;
        const int64_t end = start + tile_elems < a.n ? start + tile_elems : a.n;
        const float sum = block_sum<kBlock>(
            thread_sum<Loss, kBroadcast, kBlock, kUnroll, kStream>(a, start, end, vector));
        if (threadIdx.x == 0) partials[tile] = sum;
    }
}

// Pass 2: one block adds the partials in float64, in a fixed order, and writes the mean.
__global__ void __launch_bounds__(kFinalThreads) finish_mean(const float* partials, int64_t count,
                                                             int64_t n, float* out) {
    wait_for_previous_kernel();
    const float4* vectors = reinterpret_cast<const float4*>(partials);  // 16-byte aligned
    const int64_t nvec = count / 4;
    double acc = 0.0;
    for (int64_t v = threadIdx.x; v < nvec; v += kFinalThreads) {
        const float4 p = vectors[v];
        acc += (static_cast<double>(p.x) + p.y) + (static_cast<double>(p.z) + p.w);
    }
    for (int64_t i = 4 * nvec + threadIdx.x; i < count; i += kFinalThreads) acc += partials[i];
    acc = block_sum<kFinalThreads>(acc);  // complete in thread 0 (common/reduce.cuh)
    if (threadIdx.x == 0) *out = static_cast<float>(acc / static_cast<double>(n));
}

// The mean of a one-round sum (one block or one cluster): n <= 2^18 is exact in float, so one
// float division rounds the exact quotient once. (A float64 division, then a rounding to float,
// gives the same bits here: the quotient of a float by n <= 2^18 is never within float64's
// rounding of a float midpoint.)
__device__ __forceinline__ float one_block_result(float sum, int64_t n) {
    return sum / static_cast<float>(n);
}

// Small inputs not 16-byte aligned: one block reads everything and writes the mean.
template <class Loss, bool kBroadcast>
__global__ void __launch_bounds__(kOneBlockThreads) one_block_mean(ReductionArgs a) {
    const float sum = block_sum<kOneBlockThreads>(
        thread_sum<Loss, kBroadcast, kOneBlockThreads, kOneBlockUnroll>(a, 0, a.n, false));
    if (threadIdx.x == 0) *a.out = one_block_result(sum, a.n);
}

// This thread's part of a 16-byte aligned input of 4 elements or more that kAll threads (one
// block, or a cluster's blocks) read in one round, as straight-line code: thread g takes vectors
// g, g + kAll, ... (up to kLoads per input) and issues all its loads before any arithmetic,
// where a loop over the vectors would wait for each load in turn (at 2^13 elements, two round
// trips to memory). Loads past the end that read the last vector again, instead of the branches,
// were slower at 2^13. kFull: n is exactly kAll x kLoads vectors, so every load is in bounds and
// the checks go, as they do in torch.compile's program compiled for that one size (its bounds
// are constants): at 2^12 elements the checks cost 2-3% (bench/one_block_probe.py).
template <class Loss, bool kBroadcast, int kAll, int kLoads, bool kFull, bool kPow2Period>
__device__ __forceinline__ float one_round_sum(const ReductionArgs& a, int g) {
    const Loss loss;
    const float4* pred = reinterpret_cast<const float4*>(a.pred);
    const float4* target = reinterpret_cast<const float4*>(a.target);
    const uint32_t period = static_cast<uint32_t>(a.target_len);  // a broadcast target's length
    const int nvec = static_cast<int>(a.n / 4);
    // Where the threads' stride (4 x kAll elements) is a multiple of a power-of-two period, all
    // of a thread's loads meet the same target vector: it is read once, as Inductor's program
    // folds its loads' indices into one (Hinge 2^12-2^13: span -4 to -5%, PERFLOG, session 28).
    const bool one_vector = kPow2Period && (4u * kAll & (period - 1)) == 0;
    float4 p[kLoads], t[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
        const int v = g + u * kAll;
        if (kFull || v < nvec) {
            p[u] = pred[v];
            if (!kBroadcast) t[u] = target[v];
            else if (u > 0 && one_vector) t[u] = t[0];
            else t[u] = __ldg(target + broadcast_vector<kPow2Period>(v, period));
        }
    }
    float acc = 0.0f;
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
        if (kFull || g + u * kAll < nvec)
            acc += (loss(p[u].x, t[u].x) + loss(p[u].y, t[u].y)) +
                   (loss(p[u].z, t[u].z) + loss(p[u].w, t[u].w));
    const int64_t i = 4 * static_cast<int64_t>(nvec) + g;  // the last 0-3 elements
    if (!kFull && i < a.n) acc += loss(a.pred[i], a.target[kBroadcast ? i % a.target_len : i]);
    return acc;
}

// Small aligned inputs: one block reads everything in one round and writes the mean.
template <class Loss, bool kBroadcast, int kBlock, int kLoads, bool kFull, bool kPow2Period>
__global__ void __launch_bounds__(kBlock) one_block_mean_vec(ReductionArgs a) {
    const float sum = block_sum<kBlock>(
        one_round_sum<Loss, kBroadcast, kBlock, kLoads, kFull, kPow2Period>(a, threadIdx.x));
    if (threadIdx.x == 0) *a.out = one_block_result(sum, a.n);
}

// Mid-size aligned inputs on Hopper: one cluster of kBlocks blocks reads everything in one
// round, as one block of kBlocks x 1024 threads would. Each block's sum goes into rank
// 0's shared memory (distributed shared memory: cluster.map_shared_rank), and one cluster
// barrier replaces pass 2: no partials in global memory, no second kernel, no counter. At 2^16
// elements an H100's call took 0.79 of torch.compile's time where two passes took 0.91 (MSE)
// and 1.03 (Hinge) (bench/PERFLOG.md, session 31). A build for GPUs before Hopper, which have
// no clusters, has an empty kernel, and the launcher keeps two passes there.
template <class Loss, bool kBroadcast, int kBlocks, int kLoads, bool kFull, bool kPow2Period>
__global__ void __launch_bounds__(kClusterThreads) cluster_mean_vec(ReductionArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    __shared__ float block_sums[kBlocks];  // rank 0's is the one written
    // A block may write another's shared memory only once that block has started: this block
    // says so now and waits for the others after its loads, when they have long started. The
    // arrival is relaxed: nothing before it needs ordering, and the default arrival (a release)
    // cost about half a microsecond a call at 2^15-2^18 (bench/PERFLOG.md, session 31).
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    constexpr int kAll = kBlocks * kClusterThreads;
    const float sum = block_sum<kClusterThreads>(
        one_round_sum<Loss, kBroadcast, kAll, kLoads, kFull, kPow2Period>(
            a, static_cast<int>(rank) * kClusterThreads + threadIdx.x));
    cluster.barrier_wait();
    if (threadIdx.x == 0) *cluster.map_shared_rank(&block_sums[rank], 0) = sum;
    cluster.sync();  // every block's sum is in rank 0's shared memory
    if (rank == 0 && threadIdx.x == 0) {
        float total = 0.0f;  // a fixed order: the sum's bits are fixed by the shape
        for (int r = 0; r < kBlocks; ++r) total += block_sums[r];
        *a.out = one_block_result(total, a.n);
    }
#endif
}

// One block of kBlock threads for aligned inputs of up to kBlock x kLoads vectors: the copy
// without bounds checks when the input fills every load, and for a broadcast target whose
// length is a power of two, the copy that masks.
template <class Loss, bool kBroadcast, int kBlock, int kLoads, bool kPow2Period>
static auto one_block_kernel(bool full) {
    return full ? one_block_mean_vec<Loss, kBroadcast, kBlock, kLoads, true, kPow2Period>
                : one_block_mean_vec<Loss, kBroadcast, kBlock, kLoads, false, kPow2Period>;
}
template <class Loss, bool kBroadcast, int kBlock, int kLoads>
static void launch_one_block(const ReductionArgs* a, cudaStream_t stream) {
    const bool full = a->n == 4LL * kBlock * kLoads;
    auto kernel = one_block_kernel<Loss, kBroadcast, kBlock, kLoads, false>(full);
    if constexpr (kBroadcast)
        if ((a->target_len & (a->target_len - 1)) == 0)
            kernel = one_block_kernel<Loss, kBroadcast, kBlock, kLoads, true>(full);
    kernel<<<1, kBlock, 0, stream>>>(*a);
}

template <class Loss, bool kBroadcast, int kBlocks, int kLoads, bool kPow2Period>
static auto cluster_kernel(bool full) {
    return full ? cluster_mean_vec<Loss, kBroadcast, kBlocks, kLoads, true, kPow2Period>
                : cluster_mean_vec<Loss, kBroadcast, kBlocks, kLoads, false, kPow2Period>;
}

// Whether this GPU runs a cluster of kernel's kBlocks blocks of 1024 threads: only a build for
// Hopper or later has the cluster kernels (a build for older GPUs has empty ones:
// compiled_arch.cuh); past 8 blocks, a non-portable size, only once the kernel allows it; and
// only where a GPC has the SMs.
template <int kBlocks, class Kernel>
static bool cluster_fits(Kernel kernel, cudaLaunchConfig_t config) {
    int clusters = 0;
    const cudaFuncAttribute past8 = cudaFuncAttributeNonPortableClusterSizeAllowed;
    const bool fits =
        compiled_arch(kernel) >= 90 &&
        (kBlocks <= 8 || cudaFuncSetAttribute(kernel, past8, 1) == cudaSuccess) &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
    if (!fits) cudaGetLastError();  // the failed query's error is not the loss's
    return fits;
}

// One cluster of kBlocks blocks, kLoads loads per input per thread, for aligned inputs of up to
// kBlocks x kClusterThreads x kLoads vectors (copies as launch_one_block's). False, launching
// nothing, where the cluster does not fit (asked once per device and kernel).
template <class Loss, bool kBroadcast, int kBlocks, int kLoads>
static bool launch_cluster(const ReductionArgs* a, cudaStream_t stream) {
    const bool full = a->n == 4LL * kBlocks * kClusterThreads * kLoads;
    const bool pow2 = kBroadcast && (a->target_len & (a->target_len - 1)) == 0;
    auto kernel = pow2 ? cluster_kernel<Loss, kBroadcast, kBlocks, kLoads, kBroadcast>(full)
                       : cluster_kernel<Loss, kBroadcast, kBlocks, kLoads, false>(full);
    cudaLaunchAttribute cluster_dim{};
    cluster_dim.id = cudaLaunchAttributeClusterDimension;
    cluster_dim.val.clusterDim.x = kBlocks;
    cluster_dim.val.clusterDim.y = 1;
    cluster_dim.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kBlocks);
    config.blockDim = dim3(kClusterThreads);
    config.stream = stream;
    config.attrs = &cluster_dim;
    config.numAttrs = 1;
    static int fits[64][4] = {};  // per device and copy: 0 not asked yet, 1 no, 2 yes
    int device = 0;
    cudaGetDevice(&device);
    if (device >= 64) return false;
    int& known = fits[device][2 * full + pow2];
    if (known == 0) known = cluster_fits<kBlocks>(kernel, config) ? 2 : 1;
    if (known == 1) return false;
    cudaLaunchKernelEx(&config, kernel, *a);
    return true;
}

// Pass 1 in blocks of kBlock threads, with evict-first loads or plain ones.
template <class Loss, bool kBroadcast, int kBlock>
static cudaError_t launch_tiles(const ReductionArgs* a, float* partials, int64_t tiles,
                                int64_t tile_elems, int64_t blocks, bool vector,
                                bool stream_loads, cudaStream_t stream) {
    auto pass1 = stream_loads ? tile_partials<Loss, kBroadcast, true, kBlock>
                              : tile_partials<Loss, kBroadcast, false, kBlock>;
    pass1<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(*a, partials, tiles, tile_elems,
                                                                 vector);
    return cudaGetLastError();
}

template <class Loss, bool kBroadcast>
static cudaError_t launch(const ReductionArgs* a, bool vector, cudaStream_t stream) {
    if (a->n <= kOneBlockMax) {
        if (!vector)
            one_block_mean<Loss, kBroadcast><<<1, kOneBlockThreads, 0, stream>>>(*a);
        else if (a->n <= kSmallMax)
            launch_one_block<Loss, kBroadcast, kSmallThreads, kSmallUnroll>(a, stream);
        else if (a->n <= kOneBlockMax / 2)  // 2^13 fills two loads (span -4 to -10%)
            launch_one_block<Loss, kBroadcast, kOneBlockThreads, kOneBlockUnroll / 2>(a, stream);
        else
            launch_one_block<Loss, kBroadcast, kOneBlockThreads, kOneBlockUnroll>(a, stream);
        return cudaGetLastError();
    }
    if (CLUSTERS && vector && a->n <= kClusterMax) {
        const bool launched =
            a->n <= kClusterMax / 4   ? launch_cluster<Loss, kBroadcast, 8, 2>(a, stream)
            : a->n <= kClusterMax / 2 ? launch_cluster<Loss, kBroadcast, 8, 4>(a, stream)
                                      : launch_cluster<Loss, kBroadcast, 16, 4>(a, stream);
        if (launched) return cudaGetLastError();
    }
    // A broadcast target stays in the caches, so pass 1 streams one input, not two: a tile of
    // kMinTile elements streams half the bytes of a same-shape one. Where it reads evict-first,
    // it gets tiles twice as long (the same bytes per tile) in blocks half as wide, twice as
    // many per SM: on an H100 pass 1 then took 0.6 us less at 2^22 elements and 1.4 us less at
    // 2^24 (profiler), a twentieth of the call. Below 2^21 its tiles are few, and the same
    // change cost 0.7-1.2 us (bench/PERFLOG.md, session 26).
    const bool stream_range = a->n >= kStreamFrom && a->n < kStreamBelow;
    const bool wide = kBroadcast && stream_range;
    const int64_t tile_elems = tile_size(a->n, wide ? 2 * kMinTile : kMinTile);
    const int64_t tiles = ceil_div(a->n, tile_elems);
    int64_t blocks = tiles;
    if (grid_cap() > 0 && blocks > grid_cap()) blocks = grid_cap();
    float* partials = static_cast<float*>(a->workspace);  // 256-byte aligned
    const bool stream_loads = STREAM_LOADS && stream_range;
    const cudaError_t error =
        wide ? launch_tiles<Loss, kBroadcast, kBroadcast ? kBroadcastThreads : kThreads>(
                   a, partials, tiles, tile_elems, blocks, vector, stream_loads, stream)
             : launch_tiles<Loss, kBroadcast, kThreads>(a, partials, tiles, tile_elems, blocks,
                                                        vector, stream_loads, stream);
    if (error != cudaSuccess) return error;
    return launch_dependent<finish_mean>(dim3(1), dim3(kFinalThreads), stream,
                                         static_cast<const float*>(partials), tiles, a->n, a->out);
}

template <class Loss>
static cudaError_t launch_two_pass(const ReductionArgs* a, cudaStream_t stream) {
    const bool broadcast = a->target_len != a->n;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!broadcast || (a->target_len % 4 == 0 && a->target_len < (1LL << 31)));
    return broadcast ? launch<Loss, true>(a, vector, stream)
                     : launch<Loss, false>(a, vector, stream);
}

extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<MseLoss>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<SmoothL1Loss>(a, s);
}
extern "C" cudaError_t hinge_launch(const ReductionArgs* a, cudaStream_t s) {
    return launch_two_pass<HingeLoss>(a, s);
}
