// Chapter 6: the element-wise losses as operators a training loop can use: forward and gradient
// in one pass (12 bytes per fp32 element instead of 20), float32 / bfloat16 / float16, reduction
// "mean", "sum" or "none". The kernels are in kernels/common/fused_loss.cuh (a template over the
// loss functors of kernels/common/losses.cuh). kernels/operators.py gives each op its fake
// kernel and its autograd formula.
#include "fused_loss.cuh"

// One launcher per element-wise loss of the registry, kernels/losses.py: the build defines
// KERNELS_ELEMENT_WISE_LOSSES(X) as X(mse, MseLoss) X(smooth_l1, SmoothL1Loss) ..., one X per
// entry, so a new loss needs no line here (kernels/codegen.py).
#define FUSED_LOSS_LAUNCHER(op, Loss)                                             \
    extern "C" cudaError_t op##_launch(const FusedLossArgs* a, cudaStream_t s) {  \
        return launch_fused<Loss>(a, s);                                          \
    }
KERNELS_ELEMENT_WISE_LOSSES(FUSED_LOSS_LAUNCHER)

// The backward shared by all: grad *= grad_output on the GPU, nothing when it is 1.
extern "C" cudaError_t loss_scale_grad_launch(const FusedLossArgs* a, cudaStream_t s) {
    return launch_scale_grad(a, s);
}
