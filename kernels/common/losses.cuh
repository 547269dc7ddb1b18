// The element-wise losses, each declared once: its value and its derivative with respect to the
// prediction, as a functor. The reduction kernels from chapter 3 on are templates over one of
// these (chapters 3-4 call only the value), so a new element-wise loss is one struct here plus
// its entry in kernels/losses.py.
// Each value is NaN for NaN input, as PyTorch's (note: fmaxf(NaN, 0) would return 0).
// grad(p, t) is d value / d p, with PyTorch's choice at the kinks (the derivative autograd gives
// for the reference expression in kernels/losses.py).
// kBroadcastTarget: the target may be one row that every row of the prediction shares.
#pragma once

struct MseLoss {  // F.mse_loss(p, t): (p - t)^2
    static constexpr bool kBroadcastTarget = false;
    __device__ __forceinline__ float operator()(float p, float t) const {
        const float d = p - t;
        return d * d;
    }
    __device__ __forceinline__ float grad(float p, float t) const { return 2.0f * (p - t); }
};

struct SmoothL1Loss {  // F.smooth_l1_loss(p, t, beta=beta); beta = 0 is the L1 loss
    static constexpr bool kBroadcastTarget = false;
    float beta = 1.0f;
    __device__ __forceinline__ float operator()(float p, float t) const {
        const float d = fabsf(p - t);
        return d < beta ? 0.5f * d * d / beta : d - 0.5f * beta;
    }
    __device__ __forceinline__ float grad(float p, float t) const {
        const float d = p - t;  // PyTorch: d / beta inside (-beta, beta), else sign(d)
        if (fabsf(d) < beta) return d / beta;
        return d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : d);  // d == 0 (beta = 0): 0; NaN: NaN
    }
};

struct HingeLoss {  // torch.clamp(1 - p * y, min=0), y in {-1, +1}
    static constexpr bool kBroadcastTarget = true;
    __device__ __forceinline__ float operator()(float p, float y) const {
        const float margin = 1.0f - p * y;
        return margin < 0.0f ? 0.0f : margin;
    }
    // clamp passes the gradient where its input >= min (the kink included), so -y there.
    __device__ __forceinline__ float grad(float p, float y) const {
        return 1.0f - p * y >= 0.0f ? -y : 0.0f;
    }
};

// F.binary_cross_entropy_with_logits(x, y, pos_weight=w) with a scalar w: with l = 1 + (w - 1) y,
// (1 - y) x + l softplus(-x), softplus(-x) = log(1 + e^-|x|) + max(-x, 0) (no overflow for any x).
// log(1 + e^-|x|) is two MUFU instructions (__expf: ex2.approx, __logf: lg2.approx) instead of
// the library's expf and log1pf: with those, a bfloat16 forward ran out of instruction issue at
// 90% of the read bandwidth (bench/PERFLOG.md). Where e^-|x| < 2^-24, 1 + e^-|x| rounds to 1 and
// the term to 0 where log1pf would keep e^-|x|: an absolute error below l * 2^-24.
struct BceWithLogitsLoss {
    static constexpr bool kBroadcastTarget = false;
    float pos_weight = 1.0f;
    __device__ __forceinline__ float operator()(float x, float y) const {
        const float l = 1.0f + (pos_weight - 1.0f) * y;
        return (1.0f - y) * x + l * (__logf(1.0f + __expf(-fabsf(x))) + fmaxf(-x, 0.0f));
    }
    // (1 - y) - l sigmoid(-x), with sigmoid(-x) = 1 / (1 + e^x): 0 when e^x overflows.
    __device__ __forceinline__ float grad(float x, float y) const {
        const float l = 1.0f + (pos_weight - 1.0f) * y;
        return (1.0f - y) - l / (1.0f + expf(x));
    }
};
