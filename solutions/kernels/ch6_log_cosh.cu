// Solution to exercise 6.1: log-cosh as a fused loss operator.
//
// log(cosh(d)) = |d| + log((1 + e^(-2|d|)) / 2) = |d| + log1p(e^(-2|d|)) - log 2: e^(-2|d|) is at
// most 1, so nothing overflows, and log1p keeps the digits for large |d| where the term is tiny.
// (cosh itself overflows float32 beyond |d| = 89.) The derivative is tanh(d), bounded by 1.
#include "fused_loss.cuh"

struct LogCoshLoss {
    static constexpr bool kBroadcastTarget = false;
    __device__ __forceinline__ float operator()(float p, float t) const {
        const float a = fabsf(p - t);
        return a + log1pf(expf(-2.0f * a)) - 0.69314718f;  // NaN in, NaN out
    }
    __device__ __forceinline__ float grad(float p, float t) const { return tanhf(p - t); }
};

extern "C" cudaError_t log_cosh_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_fused<LogCoshLoss>(a, s);
}
extern "C" cudaError_t log_cosh_scale_grad_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_scale_grad(a, s);
}
