// Chapter 6: an element-wise loss and its gradient in one pass, for float32, bfloat16 and float16.
//
// What a training step needs from a loss is its value AND d loss / d pred. Computed apart, the
// forward reads pred and target (8 bytes per fp32 element) and the backward reads them again and
// writes the gradient (12 more): 20 bytes per element. Here one pass reads each input once,
// adds the loss up and writes the gradient beside it: 12 bytes. The backward then only
// multiplies the gradient by grad_output, and only when the forward did not already.
//
// The loss-scaling guess. A training loop that scales its loss (fp16 AMP's GradScaler, a loss
// weight) passes the same grad_output != 1 step after step, and a backward that multiplies
// the gradient again reads and writes it once more: 20 bytes instead of 12. So the forward
// multiplies the gradient by a guess of grad_output, a float on the GPU (FusedLossArgs::
// grad_guess, kept by kernels/ops/grad_guess.py: the grad_output of this loss's last backward;
// guess_factor in cuda_utils.cuh).
// launch_scale_grad is given the same guess: it multiplies by grad_output / guess, which is
// exactly 1 when the guess was right, and then returns at once. It also writes grad_output as
// the next guess. Nothing waits on the host, and a wrong guess costs only the 8 bytes of the
// scaling pass: the gradient is right whatever the guess was.
//
// The reduction is chapter 4's version 5 (a block of 512 threads per tile of at least 4096
// elements, at most 8192 tiles, one float partial per tile, then one block adds the partials in
// float64 in a fixed order): same inputs, same bits. Values are loaded 16 bytes at a time
// (4 fp32 or 8 bf16/fp16) and converted to float: bf16 and fp16 are accumulated in fp32 and
// the result is rounded once, to the inputs' dtype, as PyTorch's losses return it.
// reduction "none" (no sum) is a grid-stride pass writing each element's loss and gradient.
//
// A kernel file includes this header and declares one launcher per loss of losses.cuh:
//     extern "C" cudaError_t mse_launch(const FusedLossArgs* a, cudaStream_t s) {
//         return launch_fused<MseLoss>(a, s);
//     }
// plus one launcher, launch_scale_grad, for the backward (see kernels/ch6_operators/).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <type_traits>

#include "cuda_utils.cuh"
#include "fused_loss_args.h"
#include "losses.cuh"
#include "numerics.cuh"  // to_acc, from_acc, Vec
#include "reduce.cuh"

namespace fused {

constexpr int kThreads = 512;           // threads per block of the tile and "none" kernels
constexpr int kLoads = 2;               // 16-byte loads per input per thread per step
constexpr int64_t kMinTile = 4096;      // elements per tile, at least
constexpr int64_t kWantedTiles = 8192;  // tiles double until there are at most this many
constexpr int kFinalThreads = 1024;     // one block adds the tiles' partials
// As chapter 4's version 5: registers for 3 blocks of 512 threads per SM from sm_80 on (an SM
// holds 2048 threads there); a Turing SM (sm_75, Colab's T4) holds 1024.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int kBlocksPerSm = 1;
#else
constexpr int kBlocksPerSm = 3;
#endif

// ----------------------------------------------------------------------------------------------
// Values in memory (T) and in arithmetic (float): to_acc, from_acc and Vec come from numerics.cuh.

// 16 bytes of T: one load or store instruction (LDG.128 / STG.128), numerics.cuh's Vec.
template <class T> constexpr int kPackN = 16 / sizeof(T);
template <class T> using Pack = Vec<T, kPackN<T>>;

// The loss with its parameter: SmoothL1Loss{beta}; losses without one ignore it.
template <class Loss, class = void> struct TakesParam : std::false_type {};
template <class Loss> struct TakesParam<Loss, std::void_t<decltype(Loss{0.0f})>> : std::true_type {};
template <class Loss> static Loss make_loss(float param) {
    if constexpr (TakesParam<Loss>::value) return Loss{param};
    else return Loss{};
}

// One pack: the sum of its losses (pairwise), and its gradients times grad_scale stored to *g.
template <class Loss, class T, bool kGrad>
__device__ __forceinline__ float pack_step(const Loss& loss, const Pack<T>& p, const Pack<T>& t,
                                           float grad_scale, Pack<T>* g) {
    constexpr int kN = kPackN<T>;
    float value[kN];
    Pack<T> grad;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
        const float pk = to_acc(p.v[k]), tk = to_acc(t.v[k]);
        value[k] = loss(pk, tk);
        if constexpr (kGrad) grad.v[k] = from_acc<T>(loss.grad(pk, tk) * grad_scale);
    }
    if constexpr (kGrad) *g = grad;
#pragma unroll
    for (int width = 1; width < kN; width *= 2)
#pragma unroll
        for (int k = 0; k < kN; k += 2 * width) value[k] += value[k + width];
    return value[0];
}

// This thread's part of the sum over elements [start, end) (and their gradients): pack number
// i, i + kThreads, ... of the range, kLoads packs per input in flight, then the packs left, then
// the last few elements one at a time. vector: every pointer is 16-byte aligned, start is a
// multiple of the pack (tiles are), and so is a broadcast target's length (< 2^31 then).
template <class Loss, class T, bool kBroadcast, bool kGrad>
__device__ float tile_sum(const Loss& loss, const FusedLossArgs& a, int64_t start, int64_t end,
                          bool vector, float grad_scale) {
    constexpr int kN = kPackN<T>;
    const T* pred = static_cast<const T*>(a.pred);
    const T* target = static_cast<const T*>(a.target);
    T* grad = static_cast<T*>(a.grad);
    float acc = 0.0f;
    int64_t scalars_from = start;
    if (vector) {
        const Pack<T>* pv = reinterpret_cast<const Pack<T>*>(pred + start);
        const Pack<T>* tv = reinterpret_cast<const Pack<T>*>(target + (kBroadcast ? 0 : start));
        Pack<T>* gv = kGrad ? reinterpret_cast<Pack<T>*>(grad + start) : nullptr;
        const uint32_t period = static_cast<uint32_t>(a.target_len);
        const uint32_t base = kBroadcast ? static_cast<uint32_t>(start % a.target_len) : 0;
        auto target_at = [&](int v) {  // a broadcast row: 32-bit index arithmetic
            return kBroadcast ? __ldg(reinterpret_cast<const uint4*>(tv) + (base + kN * v) % period / kN)
                              : *reinterpret_cast<const uint4*>(tv + v);
        };
        const int npacks = static_cast<int>((end - start) / kN);  // a tile: < 2^31 packs
        int v = threadIdx.x;
        for (; v + (kLoads - 1) * kThreads < npacks; v += kLoads * kThreads) {
            Pack<T> p[kLoads], t[kLoads];
#pragma unroll
            for (int u = 0; u < kLoads; ++u) {  // every load issued before any arithmetic
                p[u] = pv[v + u * kThreads];
                const uint4 raw = target_at(v + u * kThreads);
                t[u] = *reinterpret_cast<const Pack<T>*>(&raw);
            }
#pragma unroll
            for (int u = 0; u < kLoads; ++u)
                acc += pack_step<Loss, T, kGrad>(loss, p[u], t[u], grad_scale, gv + v + u * kThreads);
        }
        for (; v < npacks; v += kThreads) {
            const uint4 raw = target_at(v);
            acc += pack_step<Loss, T, kGrad>(loss, pv[v], *reinterpret_cast<const Pack<T>*>(&raw),
                                             grad_scale, gv + v);
        }
        scalars_from = start + static_cast<int64_t>(kN) * npacks;
    }
    for (int64_t i = scalars_from + threadIdx.x; i < end; i += kThreads) {
        const float p = to_acc(pred[i]), t = to_acc(target[kBroadcast ? i % a.target_len : i]);
        acc += loss(p, t);
        if constexpr (kGrad) grad[i] = from_acc<T>(loss.grad(p, t) * grad_scale);
    }
    return acc;
}

// Pass 1: one float partial per tile (the hardware hands tiles to SMs as blocks finish).
template <class Loss, class T, bool kBroadcast, bool kGrad>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
tile_partials(FusedLossArgs a, Loss loss, float grad_scale, float* partials, int64_t tile_elems,
              bool vector) {
    const int64_t start = blockIdx.x * tile_elems;
    const int64_t end = start + tile_elems < a.n ? start + tile_elems : a.n;
    if constexpr (kGrad) grad_scale *= guess_factor(a.grad_guess);
    const float sum = block_sum<kThreads>(
        tile_sum<Loss, T, kBroadcast, kGrad>(loss, a, start, end, vector, grad_scale));
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2: one block adds the partials in float64, in a fixed order, and writes sum * scale.
template <class T>
__global__ void __launch_bounds__(kFinalThreads) finish(const float* partials, int64_t count,
                                                        double scale, T* out) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += kFinalThreads) acc += partials[i];
    acc = block_sum<kFinalThreads>(acc);
    if (threadIdx.x == 0) *out = from_acc<T>(static_cast<float>(acc * scale));
}

// reduction "none": every element's loss, and its gradient when a.grad is set.
template <class Loss, class T, bool kBroadcast>
__global__ void __launch_bounds__(kThreads) each_element(FusedLossArgs a, Loss loss, bool vector) {
    constexpr int kN = kPackN<T>;
    const T* pred = static_cast<const T*>(a.pred);
    const T* target = static_cast<const T*>(a.target);
    T* out = static_cast<T*>(a.out);
    T* grad = static_cast<T*>(a.grad);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    int64_t scalars_from = 0;
    if (vector) {
        const int64_t npacks = a.n / kN;
        for (int64_t v = first; v < npacks; v += stride) {
            const Pack<T> p = reinterpret_cast<const Pack<T>*>(pred)[v];
            const Pack<T> t = reinterpret_cast<const Pack<T>*>(target)[kBroadcast ? v % (a.target_len / kN) : v];
            Pack<T> value, g;
#pragma unroll
            for (int k = 0; k < kN; ++k) {
                const float pk = to_acc(p.v[k]), tk = to_acc(t.v[k]);
                value.v[k] = from_acc<T>(loss(pk, tk));
                g.v[k] = from_acc<T>(loss.grad(pk, tk));
            }
            reinterpret_cast<Pack<T>*>(out)[v] = value;
            if (grad) reinterpret_cast<Pack<T>*>(grad)[v] = g;
        }
        scalars_from = npacks * kN;
    }
    for (int64_t i = scalars_from + first; i < a.n; i += stride) {
        const float p = to_acc(pred[i]), t = to_acc(target[kBroadcast ? i % a.target_len : i]);
        out[i] = from_acc<T>(loss(p, t));
        if (grad) grad[i] = from_acc<T>(loss.grad(p, t));
    }
}

// The backward of "mean" and "sum": grad *= grad_output / the forward's guess, in place; nothing
// at all when that is 1 (a right guess, or loss.backward() without one). Stores the next guess.
template <class T>
__global__ void __launch_bounds__(kThreads) scale_in_place(T* grad, int64_t n, const T* grad_output,
                                                           const float* guess, float* next_guess,
                                                           bool vector) {
    const float wanted = to_acc(*grad_output);
    if (next_guess != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *next_guess = wanted;
    const float g = wanted / guess_factor(guess);
    if (g == 1.0f) return;
    constexpr int kN = kPackN<T>;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    int64_t scalars_from = 0;
    if (vector) {
        Pack<T>* packs = reinterpret_cast<Pack<T>*>(grad);
        for (int64_t v = first; v < n / kN; v += stride) {
            Pack<T> x = packs[v];
#pragma unroll
            for (int k = 0; k < kN; ++k) x.v[k] = from_acc<T>(to_acc(x.v[k]) * g);
            packs[v] = x;
        }
        scalars_from = n / kN * kN;
    }
    for (int64_t i = scalars_from + first; i < n; i += stride)
        grad[i] = from_acc<T>(to_acc(grad[i]) * g);
}

// Elements per tile for n inputs: a function of n only, so the sum order is fixed by n.
static inline int64_t tile_size(int64_t n) {
    int64_t tile = kMinTile;
    while (ceil_div(n, tile) > kWantedTiles) tile *= 2;
    return tile;
}

template <class Loss, class T, bool kBroadcast>
static cudaError_t launch_shape(const FusedLossArgs* a, cudaStream_t stream) {
    constexpr int kN = kPackN<T>;
    const Loss loss = make_loss<Loss>(a->param);
    const bool none = a->reduction == REDUCTION_NONE;
    const bool vector = is_aligned16(a->pred) && is_aligned16(a->target) &&
                        (!a->grad || is_aligned16(a->grad)) && (!none || is_aligned16(a->out)) &&
                        (!kBroadcast || (a->target_len % kN == 0 && a->target_len < (1LL << 31)));
    if (none) {
        static const int64_t resident = resident_blocks(each_element<Loss, T, kBroadcast>, kThreads);
        const int64_t blocks = std::min(ceil_div(a->n, int64_t{kThreads} * kN), resident);
        each_element<Loss, T, kBroadcast><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            *a, loss, vector);
        return cudaGetLastError();
    }
    const int64_t tile_elems = tile_size(a->n);
    const int64_t tiles = ceil_div(a->n, tile_elems);
    const double scale = a->reduction == REDUCTION_MEAN ? 1.0 / static_cast<double>(a->n) : 1.0;
    float* partials = static_cast<float*>(a->workspace);  // 8192 floats: well inside 64 KiB
    const unsigned grid = static_cast<unsigned>(tiles);
    if (a->grad)
        tile_partials<Loss, T, kBroadcast, true><<<grid, kThreads, 0, stream>>>(
            *a, loss, static_cast<float>(scale), partials, tile_elems, vector);
    else
        tile_partials<Loss, T, kBroadcast, false><<<grid, kThreads, 0, stream>>>(
            *a, loss, 0.0f, partials, tile_elems, vector);
    finish<T><<<1, kFinalThreads, 0, stream>>>(partials, tiles, scale, static_cast<T*>(a->out));
    return cudaGetLastError();
}

template <class Loss, class T>
static cudaError_t launch_typed(const FusedLossArgs* a, cudaStream_t stream) {
    if (a->target_len == a->n) return launch_shape<Loss, T, false>(a, stream);
    if constexpr (Loss::kBroadcastTarget) return launch_shape<Loss, T, true>(a, stream);
    return cudaErrorNotSupported;  // this loss takes a target of the prediction's shape only
}

template <class T>
static cudaError_t launch_scale_typed(const FusedLossArgs* a, cudaStream_t stream) {
    const bool vector = is_aligned16(a->grad);
    static const int64_t resident = resident_blocks(scale_in_place<T>, kThreads);  // asked once
    const int64_t blocks = std::min(ceil_div(a->n, int64_t{kThreads} * kPackN<T>), resident);
    scale_in_place<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<T*>(a->grad), a->n, static_cast<const T*>(a->grad_output), a->grad_guess,
        a->next_guess, vector);
    return cudaGetLastError();
}

}  // namespace fused

// The forward of one loss: the loss (reduced or not) and, when a->grad is set, its gradient.
template <class Loss>
static cudaError_t launch_fused(const FusedLossArgs* a, cudaStream_t stream) {
    switch (a->dtype) {
        case VALUE_F32: return fused::launch_typed<Loss, float>(a, stream);
        case VALUE_BF16: return fused::launch_typed<Loss, __nv_bfloat16>(a, stream);
        case VALUE_F16: return fused::launch_typed<Loss, __half>(a, stream);
        default: return cudaErrorNotSupported;
    }
}

// The backward of "mean" and "sum" for every loss: a->grad *= *a->grad_output / the forward's
// guess (a->grad_guess), unless that is 1; *a->next_guess = *a->grad_output.
static inline cudaError_t launch_scale_grad(const FusedLossArgs* a, cudaStream_t stream) {
    switch (a->dtype) {
        case VALUE_F32: return fused::launch_scale_typed<float>(a, stream);
        case VALUE_BF16: return fused::launch_scale_typed<__nv_bfloat16>(a, stream);
        case VALUE_F16: return fused::launch_scale_typed<__half>(a, stream);
        default: return cudaErrorNotSupported;
    }
}
