// Chapter 6: the element-wise losses as operators a training loop can use: forward and gradient
// in one pass (12 bytes per fp32 element instead of 20), float32 / bfloat16 / float16, reduction
// "mean", "sum" or "none". The kernels are in kernels/common/fused_loss.cuh (a template over the
// loss functors of kernels/common/losses.cuh); this file picks which losses become ops.
// kernels/operators.py gives each op its fake kernel and its autograd formula.
#include "fused_loss.cuh"

extern "C" cudaError_t mse_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_fused<MseLoss>(a, s);
}
extern "C" cudaError_t smooth_l1_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_fused<SmoothL1Loss>(a, s);
}
extern "C" cudaError_t hinge_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_fused<HingeLoss>(a, s);
}
extern "C" cudaError_t bce_with_logits_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_fused<BceWithLogitsLoss>(a, s);
}
// The backward shared by all: grad *= grad_output on the GPU, nothing when it is 1.
extern "C" cudaError_t loss_scale_grad_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_scale_grad(a, s);
}
