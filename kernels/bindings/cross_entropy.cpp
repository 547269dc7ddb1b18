// Binding for the fused cross-entropy (chapter 5): checks the tensors, allocates the outputs and
// a workspace, and calls a launcher from a kernel file (.cu). The loader (kernels/load.py) registers
// one op per launcher the file defines:
//     cross_entropy(logits, target, ignore_index, reduction, label_smoothing, save,
//                   grad_guess=None) -> (loss, saved, bad_target)
//     cross_entropy_backward(grad_output, logits, target, lse, ignore_index, label_smoothing) -> grad
//     cross_entropy_scale_grad(grad, grad_output, grad_guess=None) -> next_guess
// reduction: 0 none, 1 mean, 2 sum. save: 0 nothing, 1 the rows' log-sum-exp (for the backward op),
// 2 the fused gradient, times grad_guess (one float32 on the device, a guess of grad_output:
// kernels/ops/grad_guess.py), scaled later by cross_entropy_scale_grad by grad_output / guess,
// which returns grad_output as a new float32, the next guess.
// bad_target is a 0-d int32 tensor on the GPU, 1 when a target was out of range: reading it is the
// caller's choice, because reading it waits for the GPU (kernels/cross_entropy.py).
// Every argument is checked before any pointer is taken: bad input raises, never crashes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "binding_utils.h"
#include "loss_args.h"

using CrossEntropyLauncher = cudaError_t (*)(const CrossEntropyArgs*, cudaStream_t);

static int logits_dtype_code(const at::Tensor& logits) {
    switch (logits.scalar_type()) {
        case at::kFloat: return LOGITS_F32;
        case at::kBFloat16: return LOGITS_BF16;
        case at::kHalf: return LOGITS_F16;
        case at::kDouble: return LOGITS_F64;
        default:
            TORCH_CHECK(false, "logits must be float32, bfloat16, float16 or float64, got ",
                        logits.scalar_type());
    }
    return -1;
}

// "(4, 5)": shapes are formatted here, not streamed as IntArrayRef into TORCH_CHECK: on the
// H100 machine (torch 2.11, this file built at -O0) streaming .sizes() into an error message
// crashed the process (segmentation fault) instead of raising.

static void check_logits_target(const at::Tensor& logits, const at::Tensor& target) {
    TORCH_CHECK(logits.is_cuda() && target.is_cuda(), "logits and target must be CUDA tensors, got ",
                logits.device(), " and ", target.device());
    TORCH_CHECK(logits.device() == target.device(), "logits and target are on different devices: ",
                logits.device(), " and ", target.device());
    TORCH_CHECK(logits.dim() == 2, "logits must be 2-D (rows x classes), got shape ", shape_of(logits));
    TORCH_CHECK(target.scalar_type() == at::kLong,
                "target must hold int64 class indices (as PyTorch's), got ", target.scalar_type());
    TORCH_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), "target must have shape (",
                std::to_string(logits.size(0)), ",) for logits of shape ", shape_of(logits), ", got ",
                shape_of(target));
}

static void raise_on(cudaError_t err) {
    TORCH_CHECK(err != cudaErrorNotSupported,
                "this kernel version does not support these arguments (dtype or gradient); "
                "use the chapter's final version");
    TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
}

template <CrossEntropyLauncher launch>
std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy_op(
        const at::Tensor& logits_in, const at::Tensor& target_in, int64_t ignore_index,
        int64_t reduction, double label_smoothing, int64_t save,
        const std::optional<at::Tensor>& grad_guess) {
    check_logits_target(logits_in, target_in);
    const int dtype = logits_dtype_code(logits_in);
    TORCH_CHECK(reduction >= 0 && reduction <= 2, "reduction must be 0 (none), 1 (mean) or 2 (sum)");
    TORCH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                "label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
    TORCH_CHECK(save >= 0 && save <= 2, "save must be 0 (nothing), 1 (lse) or 2 (gradient)");
    TORCH_CHECK(!grad_guess.has_value() || save == 2,
                "grad_guess scales the fused gradient: it needs save=2");
    const float* guess = guess_pointer(grad_guess, logits_in);
    const int64_t rows = logits_in.size(0);
    const int64_t classes = logits_in.size(1);
    const auto options = logits_in.options();
    const auto acc_options = options.dtype(dtype == LOGITS_F64 ? at::kDouble : at::kFloat);
    const c10::cuda::CUDAGuard guard(logits_in.device());

    if (rows == 0) {  // PyTorch: the mean of nothing is NaN, the sum 0, "none" an empty tensor
        at::Tensor loss = reduction == REDUCTION_NONE ? at::empty({0}, options)
                          : at::full({}, reduction == REDUCTION_MEAN ? NAN : 0.0, options);
        at::Tensor saved = save == 2 ? at::empty({0, classes}, options)
                                     : at::empty({0}, acc_options);
        return {loss, saved, at::zeros({}, options.dtype(at::kInt))};
    }
    TORCH_CHECK(classes > 0, "logits have no classes (shape ", shape_of(logits_in), ")");

    // A strided view is copied once, so that the kernel can read rows with 16-byte vectors; so
    // is a contiguous view that does not start on a 16-byte boundary (a fresh tensor does).
    at::Tensor logits = logits_in.contiguous();
    if (reinterpret_cast<uintptr_t>(logits.data_ptr()) % 16 != 0) logits = logits.clone();
    const at::Tensor target = target_in.contiguous();
    at::Tensor loss = reduction == REDUCTION_NONE ? at::empty({rows}, options) : at::empty({}, options);
    at::Tensor saved = save == 1 ? at::empty({rows}, acc_options)
                       : save == 2 ? at::empty({rows, classes}, options)
                                   : at::empty({0}, acc_options);
    at::Tensor bad = at::empty({}, options.dtype(at::kInt));
    at::Tensor workspace = at::empty({CE_WORKSPACE_BYTES(rows)}, options.dtype(at::kByte));

    CrossEntropyArgs args{};
    args.logits = logits.data_ptr();
    args.target = target.data_ptr<int64_t>();
    args.rows = rows;
    args.classes = classes;
    args.logits_dtype = dtype;
    args.reduction = static_cast<int>(reduction);
    args.ignore_index = ignore_index;
    args.label_smoothing = label_smoothing;
    args.out = loss.data_ptr();
    args.lse = save == 1 ? saved.data_ptr() : nullptr;
    args.grad = save == 2 ? saved.data_ptr() : nullptr;
    args.grad_output = nullptr;
    args.grad_guess = guess;
    args.bad_target = bad.data_ptr<int>();
    args.workspace = workspace.data_ptr();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return {loss, saved, bad};
}

template <CrossEntropyLauncher launch>
at::Tensor cross_entropy_backward_op(const at::Tensor& grad_output, const at::Tensor& logits_in,
                                     const at::Tensor& target_in, const at::Tensor& lse,
                                     int64_t ignore_index, double label_smoothing) {
    check_logits_target(logits_in, target_in);
    const int dtype = logits_dtype_code(logits_in);
    const int64_t rows = logits_in.size(0);
    TORCH_CHECK(grad_output.numel() == rows && grad_output.device() == logits_in.device() &&
                grad_output.scalar_type() == logits_in.scalar_type(),
                "grad_output must hold one value per row, of the logits' dtype and device");
    TORCH_CHECK(lse.numel() == rows && lse.device() == logits_in.device() &&
                lse.scalar_type() == (dtype == LOGITS_F64 ? at::kDouble : at::kFloat),
                "lse must be the forward's saved log-sum-exp (save=1)");
    const c10::cuda::CUDAGuard guard(logits_in.device());
    const at::Tensor logits = logits_in.contiguous();
    at::Tensor grad = at::empty_like(logits);
    if (rows == 0 || logits.size(1) == 0) return grad;
    const at::Tensor target = target_in.contiguous();
    const at::Tensor g = grad_output.contiguous();  // autograd may hand an expanded view
    const at::Tensor saved = lse.contiguous();
    at::Tensor workspace = at::empty({CE_WORKSPACE_BYTES(0)}, logits.options().dtype(at::kByte));

    CrossEntropyArgs args{};
    args.logits = logits.data_ptr();
    args.target = target.data_ptr<int64_t>();
    args.rows = rows;
    args.classes = logits.size(1);
    args.logits_dtype = dtype;
    args.reduction = REDUCTION_NONE;
    args.ignore_index = ignore_index;
    args.label_smoothing = label_smoothing;
    args.lse = const_cast<void*>(saved.data_ptr());
    args.grad = grad.data_ptr();
    args.grad_output = g.data_ptr();
    args.workspace = workspace.data_ptr();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return grad;
}

template <CrossEntropyLauncher launch>
at::Tensor cross_entropy_scale_grad_op(at::Tensor& grad, const at::Tensor& grad_output,
                                       const std::optional<at::Tensor>& grad_guess) {
    TORCH_CHECK(grad.is_cuda() && grad.is_contiguous() && grad.dim() == 2,
                "grad must be the forward's contiguous 2-D fused gradient (save=2)");
    const float* guess = guess_pointer(grad_guess, grad);
    at::Tensor next_guess = next_guess_for(grad, grad_output);
    if (grad.numel() == 0) return next_guess;
    const c10::cuda::CUDAGuard guard(grad.device());
    CrossEntropyArgs args{};
    args.rows = grad.size(0);
    args.classes = grad.size(1);
    args.logits_dtype = logits_dtype_code(grad);
    args.grad = grad.data_ptr();
    args.grad_output = grad_output.data_ptr();
    args.grad_guess = guess;
    args.next_guess = next_guess.data_ptr<float>();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return next_guess;
}

#define CROSS_ENTROPY_SCHEMA                                                                   \
    "(Tensor logits, Tensor target, int ignore_index, int reduction, float label_smoothing, " \
    "int save, Tensor? grad_guess=None) -> (Tensor, Tensor, Tensor)"
#define CROSS_ENTROPY_BACKWARD_SCHEMA                                                          \
    "(Tensor grad_output, Tensor logits, Tensor target, Tensor lse, int ignore_index, "       \
    "float label_smoothing) -> Tensor"
// Returns the next guess, a new tensor, never grad itself: an op that returns an alias of its
// mutated input cannot be traced by torch.compile (it cannot be rewritten as a functional op).
#define CROSS_ENTROPY_SCALE_GRAD_SCHEMA \
    "(Tensor(a!) grad, Tensor grad_output, Tensor? grad_guess=None) -> Tensor"
