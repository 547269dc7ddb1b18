// Binding for the chapter 6 loss operators: checks the tensors, allocates the outputs and a
// workspace, and calls a launcher of a kernel file built on kernels/common/fused_loss.cuh. The
// loader (kernels/loader.py) registers one op per launcher the file defines:
//     <loss>(pred, target, reduction, param, want_grad, grad_guess=None) -> (loss, grad)
//     <name>_scale_grad(grad, grad_output, grad_guess=None) -> next_guess
// reduction: 0 none, 1 mean, 2 sum. param: the loss's parameter (Smooth L1's beta). want_grad:
// also write d loss / d pred, times grad_guess, into grad (else grad is an empty tensor).
// grad_guess: None, or one float32 on the device, a guess of the backward's grad_output (the
// loss-scaling guess of kernels/ops/grad_guess.py). The scale op multiplies grad in place
// by grad_output / grad_guess and returns grad_output as a new float32, the next guess.
// kernels/operators.py registers each op's fake kernel and autograd formula.
// Every argument is checked before any pointer is taken: bad input raises, never crashes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "binding_utils.h"
#include "fused_loss_args.h"

using FusedLossLauncher = cudaError_t (*)(const FusedLossArgs*, cudaStream_t);

static int value_dtype(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kFloat: return VALUE_F32;
        case at::kBFloat16: return VALUE_BF16;
        case at::kHalf: return VALUE_F16;
        default:
            TORCH_CHECK(false, "these kernels take float32, bfloat16 or float16 tensors, got ",
                        t.scalar_type(), " (for float64, use PyTorch's own loss)");
    }
    return -1;
}

// The target has the prediction's shape, or is one row of its last dimension (PyTorch
// broadcasts from the right: pred[..., j] pairs with target[j]). Returns the target's length.
static int64_t target_length(const at::Tensor& pred, const at::Tensor& target) {
    bool same = target.dim() == pred.dim();
    for (int64_t d = 0; same && d < pred.dim(); ++d) same = target.size(d) == pred.size(d);
    if (same) return pred.numel();
    TORCH_CHECK(pred.dim() >= 1 && target.dim() == 1 && target.size(0) == pred.size(-1),
                "target shape ", shape_of(target), " must equal pred shape ", shape_of(pred),
                " or, for a loss that broadcasts its target, be one row of its last dimension");
    return target.numel();
}

static void raise_on(cudaError_t err) {
    TORCH_CHECK(err != cudaErrorNotSupported,
                "this loss takes a target of the prediction's shape only (no broadcast row)");
    TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
}

template <FusedLossLauncher launch>
std::tuple<at::Tensor, at::Tensor> fused_loss_op(const at::Tensor& pred, const at::Tensor& target,
                                                 int64_t reduction, double param, bool want_grad,
                                                 const std::optional<at::Tensor>& grad_guess) {
    TORCH_CHECK(pred.is_cuda() && target.is_cuda(), "pred and target must be CUDA tensors, got ",
                pred.device(), " and ", target.device());
    TORCH_CHECK(pred.device() == target.device(), "pred and target are on different devices: ",
                pred.device(), " and ", target.device());
    TORCH_CHECK(pred.scalar_type() == target.scalar_type(), "pred and target must have one dtype, got ",
                pred.scalar_type(), " and ", target.scalar_type());
    const int dtype = value_dtype(pred);
    TORCH_CHECK(reduction >= 0 && reduction <= 2, "reduction must be 0 (none), 1 (mean) or 2 (sum)");
    const int64_t target_len = target_length(pred, target);
    TORCH_CHECK(!grad_guess.has_value() || (want_grad && reduction != REDUCTION_NONE),
                "grad_guess scales the gradient of a reduced loss: it needs want_grad and "
                "reduction mean or sum");
    const float* guess = guess_pointer(grad_guess, pred);
    const c10::cuda::CUDAGuard guard(pred.device());
    const auto options = pred.options();
    at::Tensor grad = want_grad ? at::empty(pred.sizes(), options) : at::empty({0}, options);
    if (pred.numel() == 0) {  // PyTorch: the mean of nothing is NaN, the sum 0
        at::Tensor loss = reduction == REDUCTION_NONE ? at::empty(pred.sizes(), options)
                          : at::full({}, reduction == REDUCTION_MEAN ? NAN : 0.0, options);
        return {loss, grad};
    }
    at::Tensor loss = reduction == REDUCTION_NONE ? at::empty(pred.sizes(), options)
                                                  : at::empty({}, options);
    // Strided views are copied once, so that the kernel can read 16-byte vectors.
    const at::Tensor p = pred.contiguous();
    const at::Tensor t = target.contiguous();
    at::Tensor workspace = at::empty({LOSS_WORKSPACE_BYTES(p.numel())}, options.dtype(at::kByte));

    FusedLossArgs args{};
    args.pred = p.data_ptr();
    args.target = t.data_ptr();
    args.n = p.numel();
    args.target_len = target_len;
    args.dtype = dtype;
    args.reduction = static_cast<int>(reduction);
    args.param = static_cast<float>(param);
    args.out = loss.data_ptr();
    args.grad = want_grad ? grad.data_ptr() : nullptr;
    args.grad_guess = guess;
    args.workspace = workspace.data_ptr();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return {loss, grad};
}

template <FusedLossLauncher launch>
at::Tensor fused_loss_scale_grad_op(at::Tensor& grad, const at::Tensor& grad_output,
                                    const std::optional<at::Tensor>& grad_guess) {
    TORCH_CHECK(grad.is_cuda() && grad.is_contiguous(),
                "grad must be a contiguous CUDA tensor (the forward's gradient)");
    const int dtype = value_dtype(grad);
    const float* guess = guess_pointer(grad_guess, grad);
    at::Tensor next_guess = next_guess_for(grad, grad_output);
    if (grad.numel() == 0) return next_guess;
    const c10::cuda::CUDAGuard guard(grad.device());
    const at::Tensor g = grad_output.contiguous();
    FusedLossArgs args{};
    args.n = grad.numel();
    args.dtype = dtype;
    args.grad = grad.data_ptr();
    args.grad_output = g.data_ptr();
    args.grad_guess = guess;
    args.next_guess = next_guess.data_ptr<float>();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return next_guess;
}

#define FUSED_LOSS_SCHEMA                                                                  \
    "(Tensor pred, Tensor target, int reduction, float param, bool want_grad, "            \
    "Tensor? grad_guess=None) -> (Tensor, Tensor)"
#define FUSED_LOSS_SCALE_GRAD_SCHEMA \
    "(Tensor(a!) grad, Tensor grad_output, Tensor? grad_guess=None) -> Tensor"
