// Chapter 8: cross-entropy over a vocabulary split across GPUs. Each rank holds the columns
// [vocab_start, vocab_start + cols) of every row and runs these two kernels; between them,
// kernels/vocab_parallel.py all-reduces a few floats per row (the max, then the sums).
//
// shard_stats: one read of the shard. Per row it writes four floats: the shard's max m, the
//   sum of exp(x - m) over the shard (the online softmax of chapter 5: the row is read once),
//   the target's logit if this shard owns the target (else 0: exactly one rank owns it, so
//   the all-reduced sum is the target's logit), and the sum of the logits (label smoothing
//   only). Ranks then agree on M = max over ranks of m, rescale their sums by exp(m - M) and
//   add them: log-sum-exp = M + log(sum). Only these floats cross the link, never a logit.
// shard_grad: one read and one write of the shard: grad = scale * (exp(x - lse) - eps / V -
//   (1 - eps) [column is the target]), with scale = grad_output / count for the mean and 0 on
//   ignored rows (the binding's caller computes the per-row scales: a few floats per row).
//
// A block of 512 threads per row: the rows are long (a shard of a 128K-256K vocabulary), so a
// row alone fills a block, with 16-byte loads (8 bf16 or 4 fp32 values) and four of them in
// flight per thread. A shard whose width is not a multiple of 16 bytes takes one-element loads
// (slower: pad the vocabulary to a multiple of 64 or 128 columns, as Megatron-LM does).
// exp is one MUFU.EX2 (ex2.approx) as in chapter 5: with expf a bf16 row runs out of issue
// slots before it runs out of memory bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#undef NDEBUG  // the bad-target assertion stays in every build, as in chapter 5
#include <assert.h>

#include "vocab_shard_args.h"

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kLoads = 4;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

// exp(x - m) as one MUFU.EX2; -inf - m gives 0, NaN stays NaN.
__device__ __forceinline__ float exp_diff(float x, float m) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((x - m) * kLog2e));
    return y;
}

template <class T, int kVec> struct alignas(sizeof(T) * kVec) Vec { T v[kVec]; };

// A (max, sum of exp(x - max)) pair. Merging rescales both sums to the larger max; a pair whose
// max is -inf holds nothing, and must not compute -inf - (-inf) = NaN.
struct MaxSum { float max, sum; };
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return {m, 0.f};
    return {m, a.sum * exp_diff(a.max, m) + b.sum * exp_diff(b.max, m)};
}

// The block's pair and plain sum, in thread 0, in a fixed order (the same bits every run).
__device__ __forceinline__ void block_reduce(MaxSum& pair, float& sum) {
    __shared__ MaxSum pairs[kWarps];
    __shared__ float sums[kWarps];
    for (int o = 16; o > 0; o >>= 1) {
        pair = merge(pair, {__shfl_xor_sync(0xffffffffu, pair.max, o),
                            __shfl_xor_sync(0xffffffffu, pair.sum, o)});
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    if (threadIdx.x % 32 == 0) {
        pairs[threadIdx.x / 32] = pair;
        sums[threadIdx.x / 32] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) {
            pair = merge(pair, pairs[w]);
            sum += sums[w];
        }
    }
}

template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) shard_stats_kernel(VocabShardArgs a) {
    const int64_t row = blockIdx.x;
    const int64_t target = threadIdx.x == 0 ? a.target[row] : 0;  // issued early, used last
    const T* x = static_cast<const T*>(a.logits) + row * a.cols;
    const auto* xv = reinterpret_cast<const Vec<T, kVec>*>(x);
    const int64_t vectors = a.cols / kVec;  // the launcher picks a kVec that divides cols
    MaxSum pair{-INFINITY, 0.f};
    float sum = 0.f;
    for (int64_t base = threadIdx.x; base < vectors; base += int64_t(kThreads) * kLoads) {
        Vec<T, kVec> v[kLoads];
#pragma unroll
        for (int j = 0; j < kLoads; ++j)  // every load issued before any arithmetic
            if (base + j * kThreads < vectors) v[j] = xv[base + j * kThreads];
        float m = pair.max;
#pragma unroll
        for (int j = 0; j < kLoads; ++j)
            if (base + j * kThreads < vectors)
#pragma unroll
                for (int e = 0; e < kVec; ++e) m = fmaxf(m, to_float(v[j].v[e]));
        const bool finite_max = m != -INFINITY;  // else every value so far is -inf (masked)
        float s = finite_max ? pair.sum * exp_diff(pair.max, m) : 0.f;
#pragma unroll
        for (int j = 0; j < kLoads; ++j)
            if (base + j * kThreads < vectors)
#pragma unroll
                for (int e = 0; e < kVec; ++e) {
                    const float xe = to_float(v[j].v[e]);
                    if (finite_max) s += exp_diff(xe, m);
                    if (a.want_sum) sum += xe;
                }
        pair = {m, s};
    }
    block_reduce(pair, sum);
    if (threadIdx.x == 0) {
        float target_logit = 0.f;
        if (target != a.ignore_index) {
            if (target < 0 || target >= a.vocab_size)
                assert(!"vocab-parallel cross_entropy: a target is out of range [0, vocab_size) "
                        "and not ignore_index");
            const int64_t local = target - a.vocab_start;
            if (local >= 0 && local < a.cols) target_logit = to_float(x[local]);
        }
        reinterpret_cast<float4*>(a.stats)[row] = {pair.max, pair.sum, target_logit, sum};
    }
}

template <class T, int kVec>
__global__ void __launch_bounds__(kThreads) shard_grad_kernel(VocabShardArgs a) {
    const int64_t row = blockIdx.x;
    const float scale = a.row_scale[row];
    const float lse = a.lse[row];
    const int64_t target = a.target[row];
    // The target's column in this shard (anything outside [0, cols) matches no column).
    const int64_t hit_column = target == a.ignore_index ? -1 : target - a.vocab_start;
    const float smooth = a.label_smoothing / static_cast<float>(a.vocab_size);
    const float hit = 1.f - a.label_smoothing;
    const auto* xv = reinterpret_cast<const Vec<T, kVec>*>(static_cast<const T*>(a.logits) +
                                                            row * a.cols);
    auto* gv = reinterpret_cast<Vec<T, kVec>*>(static_cast<T*>(a.grad) + row * a.cols);
    const int64_t vectors = a.cols / kVec;
    for (int64_t base = threadIdx.x; base < vectors; base += int64_t(kThreads) * kLoads) {
        Vec<T, kVec> v[kLoads];
        if (scale != 0.f) {  // an ignored row (scale 0) writes zeros without reading its logits
#pragma unroll
            for (int j = 0; j < kLoads; ++j)
                if (base + j * kThreads < vectors) v[j] = xv[base + j * kThreads];
        }
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
            const int64_t k = base + j * kThreads;
            if (k >= vectors) continue;
            Vec<T, kVec> out;
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
                const float p = exp_diff(to_float(v[j].v[e]), lse);
                const float d = p - smooth - (k * kVec + e == hit_column ? hit : 0.f);
                out.v[e] = from_float<T>(scale == 0.f ? 0.f : scale * d);
            }
            gv[k] = out;
        }
    }
}

template <class T, template <class, int> class Pick>
static cudaError_t launch_as(const VocabShardArgs* a, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    if (a->cols % kVec == 0)
        Pick<T, kVec>::kernel<<<a->rows, kThreads, 0, stream>>>(*a);
    else
        Pick<T, 1>::kernel<<<a->rows, kThreads, 0, stream>>>(*a);
    return cudaGetLastError();
}

template <class T, int kVec> struct Stats { static constexpr auto kernel = shard_stats_kernel<T, kVec>; };
template <class T, int kVec> struct Grad { static constexpr auto kernel = shard_grad_kernel<T, kVec>; };

template <template <class, int> class Pick>
static cudaError_t launch(const VocabShardArgs* a, cudaStream_t stream) {
    switch (a->logits_dtype) {
        case LOGITS_F32: return launch_as<float, Pick>(a, stream);
        case LOGITS_BF16: return launch_as<__nv_bfloat16, Pick>(a, stream);
        case LOGITS_F16: return launch_as<__half, Pick>(a, stream);
        default: return cudaErrorNotSupported;
    }
}

extern "C" cudaError_t shard_stats_launch(const VocabShardArgs* args, cudaStream_t stream) {
    return launch<Stats>(args, stream);
}

extern "C" cudaError_t shard_grad_launch(const VocabShardArgs* args, cudaStream_t stream) {
    return launch<Grad>(args, stream);
}
