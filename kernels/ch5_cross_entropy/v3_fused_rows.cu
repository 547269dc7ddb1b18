// Chapter 5, version 3: the final fused cross-entropy, forward and backward, fp32/bf16/fp16/fp64.
//
// Fixes (vs version 2):
// - 16-byte loads (4 fp32 or 8 bf16/fp16 values per load), several in flight per thread.
// - The row is kept in registers when it fits (up to 4096 classes, 32 values per thread): the
//   max and the sum of exponentials then cost no second read, and the gradient softmax - one_hot
//   is written from the same registers while the forward runs (Liger-style: the forward writes
//   the gradient times a guess of grad_output, the backward only rescales it).
// - As few threads per row as hold it, 32 values each, every load of a thread issued before any
//   math: a thread per row up to 32 classes, 2, 4, 8 or 16 threads (several rows per warp) up
//   to 512, a warp up to 1024, a block of 128 up to 4096; rows of up to 16 classes of any
//   length get one thread each. Short rows then keep enough bytes in flight, and their
//   reductions are a few shuffles (no __syncthreads below a block). (With 4 threads per row
//   up to 128 classes and a warp up to 1024, rows of 32 fp32 classes took 1.30x and rows of
//   256 1.58x torch.compile's time on the H100, each thread with 2 of its 8 loads in use.)
// - Longer rows (LLM vocabularies, 128256 classes) stream through the online softmax of
//   version 2, vectorised, with a block of 512 threads per row; the gradient then takes a
//   second read of the row.
// - exp(x - m) is one subtraction, one multiplication and one MUFU.EX2 (ex2.approx) instead of
//   expf's ~8 instructions, and the sum of the logits (label smoothing only) is skipped when
//   label_smoothing == 0: bf16 rows bring twice the elements per byte of fp32, and with expf
//   they ran out of instruction issue before memory bandwidth (2.26 TB/s, now ~2.97).
// - The end: rows write their losses (an ignored row writes -0.0: the sign bit of a zero loss
//   marks it, and no valid row has a negative loss), then blocks of 1024 threads add them in a
//   fixed order in float64 with 16-byte loads and count the sign bits for the mean's divisor:
//   no targets read again (version 1's final kernel read losses and targets one at a time:
//   9.7 µs at 32768 rows). Up to 16384 rows one block does it all; beyond, each block adds a
//   chunk of 4096 losses, one load per thread, and one more block adds the chunks' sums (one
//   block took 1.2 ms for 13M rows of 10 classes, and 5 µs after the rows for 32768).
//   From sm_90 the final kernels are programmatic dependent launches (chapter 4's version 5):
//   they start while the rows' last blocks run and wait for them on the device.
//   The bad-target flag is written 0 by the thread that writes row 0, with no memset before the
//   rows: a call with an out-of-range target never returns (the assertion below), so 0 is the
//   only value a caller can read. Reduction "none" needs no final kernel at all. Tried and
//   dropped: the last block to finish adds the losses (a counter per block, no final launch):
//   each of the 32768 blocks then paid a fence and an atomic before exiting, and the row
//   kernel went from ~196 to 252 µs.
// - bf16/fp16 logits are accumulated in fp32; fp64 logits in fp64 (for torch.autograd.gradcheck,
//   on the simple path only: one scalar streaming kernel).
// Out-of-range targets are never used as an index. The kernel that reads them stops with a
// device-side assertion, as PyTorch's own kernels do: no call waits for the GPU to learn that
// its targets were fine (reading a flag back cost 34-168 µs per call, bench/PERFLOG.md), and a
// bad target still reaches Python as an error, at the next synchronisation. The price: the
// process's CUDA context is lost (chapter 6 weighs this).
// What was tried and dropped (bench/PERFLOG.md): a resident grid looping over tiles of 8 rows
// (slower: 227 vs 196 µs at 32768 x 4096, hides latency worse than a block per row), and a
// 1024-thread register path for rows of 4097..16384 fp32 (its build time was not worth it:
// those rows stream, and their gradient reads the row a second time, mostly from L2).
// Still slow: few very long rows (7 x 131075) use only 7 blocks: splitting a row across blocks
// (a cluster, or a second pass merging partial (max, sum) pairs) is left as an exercise. Rows
// longer than 512 whose length is not a multiple of the vector width (odd vocabularies such as
// 50257) skip the register path: they stream, vectorised between a few scalars at each end of
// the row. (Shorter rows of any length are read 4 bytes at a time: a thread per row up to 16
// classes, a warp per row up to 512. On the H100, rows of 10 classes read at 7 GB/s with a
// 512-thread streaming block each, 83 GB/s with a warp each, about 2 TB/s with a thread each.)
// The mean with the fused gradient needs the count of rows before the row kernel: one more
// small kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#undef NDEBUG  // the bad-target assertion stays in every build, as PyTorch's CUDA_KERNEL_ASSERT
#include <assert.h>

#include "cuda_utils.cuh"
#include "dependent_launch.cuh"
#include "loss_args.h"

// ---------------------------------------------------------------------------------------------
// Types: T is the logits' type in memory, A (acc) the type arithmetic is done in.
template <class T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ double to_acc(double x) { return x; }

template <class T> __device__ __forceinline__ T from_acc(float x);
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half(x); }
template <class T> __device__ __forceinline__ T from_acc(double x);
template <> __device__ __forceinline__ double from_acc<double>(double x) { return x; }

constexpr float kLog2e = 1.4426950408889634f;
// exp(x - m): x - m is exact near the max (Sterbenz), then one MUFU.EX2; results below 2^-126
// flush to 0, which changes no sum. -inf - m gives 0; NaN stays NaN.
__device__ __forceinline__ float exp_diff(float x, float m) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((x - m) * kLog2e));
    return y;
}
__device__ __forceinline__ double exp_diff(double x, double m) { return exp(x - m); }
__device__ __forceinline__ float acc_log(float x) { return logf(x); }
__device__ __forceinline__ double acc_log(double x) { return log(x); }
__device__ __forceinline__ float acc_max(float a, float b) { return fmaxf(a, b); }  // NaN-dropping:
__device__ __forceinline__ double acc_max(double a, double b) { return fmax(a, b); }  // NaN still
// reaches the loss through the sum of exponentials, so a NaN logit gives a NaN loss.

// kVec values of T loaded or stored as one (16-byte when kVec * sizeof(T) == 16) access.
template <class T, int kVec> struct alignas(sizeof(T) * kVec) Vec { T v[kVec]; };

constexpr int kGroupThreads = 256;   // block size when a row takes 32 threads or fewer
constexpr int kStreamThreads = 512;  // block size of the streaming (long-row) kernel
constexpr int kShortLoads = 16;      // 4-byte loads per lane for short rows of any length
constexpr int kStreamLoads = 4;      // vectors in flight per thread in the streaming kernel
constexpr int kCountThreads = 1024;  // the one-block kernels: count of targets, final sum

// ---------------------------------------------------------------------------------------------
// Reductions over the kTPR threads of one row: lanes of one warp (shuffles only; kWidth = kTPR
// up to 32) or the whole block. The order of the additions is fixed: no timing changes a row.
template <int kWidth = 32, class A> __device__ __forceinline__ A warp_max(A v) {
    for (int o = kWidth / 2; o > 0; o >>= 1) v = acc_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int kWidth = 32, class A> __device__ __forceinline__ A warp_sum(A v) {
    for (int o = kWidth / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int kTPR, class A> __device__ __forceinline__ A row_max(A v, A* smem) {
    v = warp_max<(kTPR < 32 ? kTPR : 32)>(v);
    if constexpr (kTPR > 32) {
        __syncthreads();  // smem may still be read by a previous reduction
        if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
        __syncthreads();
        v = smem[0];
#pragma unroll
        for (int w = 1; w < kTPR / 32; ++w) v = acc_max(v, smem[w]);
    }
    return v;
}

// Three sums at once (s, the sum of the logits, the target's logit); b only with label smoothing.
template <int kTPR, class A>
__device__ __forceinline__ void row_sum3(A& a, A& b, A& c, bool with_b, A* smem) {
    constexpr int kWidth = kTPR < 32 ? kTPR : 32;
    a = warp_sum<kWidth>(a);
    if (with_b) b = warp_sum<kWidth>(b);
    c = warp_sum<kWidth>(c);
    if constexpr (kTPR > 32) {
        constexpr int kWarps = kTPR / 32;
        __syncthreads();  // smem may still be read by a previous reduction
        if (threadIdx.x % 32 == 0) {
            smem[threadIdx.x / 32] = a;
            smem[kWarps + threadIdx.x / 32] = b;
            smem[2 * kWarps + threadIdx.x / 32] = c;
        }
        __syncthreads();
        a = smem[0];
        b = smem[kWarps];
        c = smem[2 * kWarps];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {
            a += smem[w];
            if (with_b) b += smem[kWarps + w];
            c += smem[2 * kWarps + w];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The workspace: the mean's gradient factor (gradient_factor) first, the rows' losses after
// 64 KiB.
template <class A> __device__ __forceinline__ A* row_losses(const CrossEntropyArgs& a) {
    return reinterpret_cast<A*>(static_cast<char*>(a.workspace) + 64 * 1024);
}

// What every row kernel does once it knows the row's lse: the loss, and the gradient's scale.
struct RowTarget {
    int64_t t;
    bool ignored, bad;
};

__device__ __forceinline__ RowTarget read_target(const CrossEntropyArgs& a, int64_t row) {
    RowTarget r;
    r.t = a.target[row];
    r.ignored = r.t == a.ignore_index;
    r.bad = !r.ignored && (r.t < 0 || r.t >= a.classes);  // never used as an index
    return r;
}

template <class A> __device__ __forceinline__ A nan_value() { return A(NAN); }

// loss = lse - (1 - eps) x_t - eps/C sum_j x_j   (PyTorch's label smoothing, per row)
template <class A>
__device__ __forceinline__ A row_loss(const CrossEntropyArgs& a, const RowTarget& r, A lse, A xt,
                                      A sum_x) {
    if (r.ignored) return A(0);
    if (r.bad) return nan_value<A>();
    const A eps = static_cast<A>(a.label_smoothing);
    if (eps == A(0)) return lse - xt;
    // Two non-negative terms: no cancellation (C = 1 gives exactly 0, as PyTorch).
    return (A(1) - eps) * (lse - xt) + eps * (lse - sum_x / static_cast<A>(a.classes));
}

// Called by the thread that owns a row's result.
template <class T, class A>
__device__ __forceinline__ void write_row(const CrossEntropyArgs& a, int64_t row,
                                          const RowTarget& r, A lse, A xt, A sum_x) {
    const A loss = row_loss(a, r, lse, xt, sum_x);
    if (a.reduction == REDUCTION_NONE)
        static_cast<T*>(a.out)[row] = from_acc<T>(loss);
    else  // -0.0 marks an ignored row for the final count (a valid row's loss is >= +0)
        row_losses<A>(a)[row] = r.ignored ? -A(0) : loss;
    if (a.lse) static_cast<A*>(a.lse)[row] = lse;
    if (row == 0) *a.bad_target = 0;  // no memset: a bad target stops the kernel just below
    if (r.bad) assert(!"cross_entropy: a target is out of range [0, classes) and not ignore_index");
}

// The factor of this row's gradient: the guess of grad_output, divided by the count for the
// mean (gradient_factor wrote that quotient before this kernel); 0 for an ignored row, NaN for
// a bad target.
template <class A>
__device__ __forceinline__ A grad_scale(const CrossEntropyArgs& a, const RowTarget& r) {
    if (r.ignored) return A(0);
    if (r.bad) return nan_value<A>();
    if (a.reduction == REDUCTION_MEAN) return *static_cast<const A*>(a.workspace);
    return static_cast<A>(guess_factor(a.grad_guess));
}

// ---------------------------------------------------------------------------------------------
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

// The 0-d result (mean or sum): the rows' losses are added in float64 in a fixed order, and the
// rows whose loss is -0.0 (ignored) are counted for the mean's divisor (0/0 = NaN: PyTorch's
// answer when every row is ignored). Up to kOneBlockRows rows, one block does it all; beyond,
// sum_chunks gives one (sum, ignored count) per chunk of kFinishChunk rows, many blocks at once,
// and finish adds the chunks' results. The second step cost more than it saved up to 16384
// rows (1.3-1.6 µs more from 8192 rows, against one block's 4 loads per thread) and saved
// 1.7 µs at 32768 rows (against one block's 8 loads per thread).
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

// ---------------------------------------------------------------------------------------------
// Backward kernels.

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

// ---------------------------------------------------------------------------------------------
// Launchers.

// A grid-stride kernel's grid: enough blocks for the work, at most what fits on the GPU at once.
static unsigned grid_for(int64_t resident, int64_t blocks_needed) {
    return static_cast<unsigned>(blocks_needed < resident ? (blocks_needed > 0 ? blocks_needed : 1)
                                                          : resident);
}

// One block per row (or per 8 rows for warps) up to 2^24 blocks; beyond, blocks loop.
static unsigned row_grid(int64_t groups) {
    return static_cast<unsigned>(groups < (1LL << 24) ? groups : (1LL << 24));
}

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
    if (a->reduction == REDUCTION_NONE) return cudaGetLastError();
    // The final kernels start while the rows' last blocks run, and wait for them on the device.
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

extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    switch (a->logits_dtype) {
        case LOGITS_F32: return forward<float>(a, s);
        case LOGITS_BF16: return forward<__nv_bfloat16>(a, s);
        case LOGITS_F16: return forward<__half>(a, s);
        case LOGITS_F64: return forward<double>(a, s);
    }
    return cudaErrorNotSupported;
}

template <class T>
static cudaError_t scale(const CrossEntropyArgs* a, cudaStream_t stream) {
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

extern "C" cudaError_t cross_entropy_scale_grad_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    switch (a->logits_dtype) {
        case LOGITS_F32: return scale<float>(a, s);
        case LOGITS_BF16: return scale<__nv_bfloat16>(a, s);
        case LOGITS_F16: return scale<__half>(a, s);
        case LOGITS_F64: return scale<double>(a, s);
    }
    return cudaErrorNotSupported;
}

template <class T>
static cudaError_t backward(const CrossEntropyArgs* a, cudaStream_t stream) {
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

extern "C" cudaError_t cross_entropy_backward_launch(const CrossEntropyArgs* a, cudaStream_t s) {
    switch (a->logits_dtype) {
        case LOGITS_F32: return backward<float>(a, s);
        case LOGITS_BF16: return backward<__nv_bfloat16>(a, s);
        case LOGITS_F16: return backward<__half>(a, s);
        case LOGITS_F64: return backward<double>(a, s);
    }
    return cudaErrorNotSupported;
}
