// Binding for the element-wise losses (MSE, Smooth L1, Hinge): checks the tensors, allocates the
// 0-d result and a scratch workspace, and calls a launcher from a kernel file (.cu). The loader
// (kernels/codegen.py) appends one registration per launcher it finds in the .cu file, such as
//     TORCH_LIBRARY(lib, m) { m.def("mse(Tensor pred, Tensor target) -> Tensor"); }
//     TORCH_LIBRARY_IMPL(lib, CUDA, m) { m.impl("mse", &reduction_op<mse_launch>); }
// so the op is called from Python as torch.ops.<lib>.mse(pred, target).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>

#include "binding_utils.h"
#include "loss_args.h"

using ReductionLauncher = cudaError_t (*)(const ReductionArgs*, cudaStream_t);

// How many trailing elements of pred one target value repeats over: PyTorch broadcasts from the
// right, so a target whose shape is a trailing suffix of pred's is read as target[i % numel].
static int64_t broadcast_period(const at::Tensor& pred, const at::Tensor& target) {
    auto p = pred.sizes();
    auto t = target.sizes();
    size_t first = 0;  // leading size-1 dimensions of target broadcast trivially
    while (first < t.size() && t[first] == 1) ++first;
    const size_t kept = t.size() - first;
    bool suffix = kept <= p.size();
    for (size_t k = 0; suffix && k < kept; ++k)
        suffix = t[first + k] == p[p.size() - kept + k];
    TORCH_CHECK(suffix, "target shape ", shape_of(target), " must equal pred shape ", shape_of(pred),
                " or one of its trailing parts (PyTorch broadcasts from the right)");
    return target.numel();
}

template <ReductionLauncher launch>
at::Tensor reduction_op(const at::Tensor& pred, const at::Tensor& target) {
    TORCH_CHECK(pred.is_cuda() && target.is_cuda(), "pred and target must be CUDA tensors, got ",
                pred.device(), " and ", target.device());
    TORCH_CHECK(pred.device() == target.device(), "pred and target are on different devices: ",
                pred.device(), " and ", target.device());
    TORCH_CHECK(pred.scalar_type() == at::kFloat && target.scalar_type() == at::kFloat,
                "these kernels take float32 tensors, got ", pred.scalar_type(), " and ",
                target.scalar_type());
    const int64_t period = broadcast_period(pred, target);
    // The mean of nothing is NaN in PyTorch too.
    if (pred.numel() == 0) return at::full({}, NAN, pred.options());

    // Strided or expanded views are copied once, so that the kernel can read 16-byte vectors.
    const at::Tensor p = pred.contiguous();
    const at::Tensor t = target.contiguous();
    const c10::cuda::CUDAGuard guard(p.device());
    at::Tensor out = at::empty({}, p.options());
    at::Tensor workspace = at::empty({LOSS_WORKSPACE_BYTES(p.numel())}, p.options().dtype(at::kByte));

    ReductionArgs args{p.data_ptr<float>(), t.data_ptr<float>(), p.numel(), period,
                       out.data_ptr<float>(), workspace.data_ptr()};
    const cudaError_t err = launch(&args, c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
    return out;
}

#define REDUCTION_SCHEMA "(Tensor pred, Tensor target) -> Tensor"
