# ---
# jupyter:
#   jupytext:
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% tags=["hide-input"]
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "https://github.com/loss-kernels/loss-kernels"
if "google.colab" in sys.modules and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ninja"], check=True)
ROOT = next(p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
            if os.path.isfile(os.path.join(p, "kernels", "__init__.py")))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# %% [markdown]
# # Solutions: chapter 9
#
# The answers to the exercises of {doc}`../chapters/09_kernelbench`.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %%
import torch

from kernels import kernelbench

# %% [markdown]
# ```{solution-start} ch9-model-new
# :class: dropdown
# ```
#
# A `ModelNew` in KernelBench's style: the CUDA source in the Python cell, compiled with
# `load_inline`. Two kernels, as in chapter 4: a grid of 8 blocks per SM, each thread striding
# over the predictions 16 bytes at a time, four loads in flight before it adds their terms in
# `float`; each block writes its sum in `double`; one block of 1024 threads adds the blocks'
# sums in a fixed order and divides by $n$. The same bits every run. (With one load in flight
# per thread, 32 KB per SM, it took about 10 % longer: chapter 3's lesson about bytes in
# flight, again.)
#
# The broadcast: element $e$ of the predictions pairs with `targets[e % cols]`, `cols` the
# targets' length (KernelBench's 32768, the predictions' last dimension; or all of $n$ for
# targets of the predictions' shape). The four values of a `float4` lie in one row when `cols`
# is a multiple of 4, so their labels are one aligned `float4` of the targets, at a column
# that each step of the grid-stride loop advances by `(4 * stride) % cols`, with one
# subtraction instead of a 64-bit modulo per load. Any other broadcast (a label per row, of
# shape (N, 1)) the forward expands first. Both kernels run on the current stream, so the
# events time all of the work and the stream check has nothing to say.

# %% tags=["gpu"]
from torch.utils.cpp_extension import load_inline

HINGE_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // loads in flight per thread

template <typename T>
__device__ T block_sum(T value) {  // the block's sum, in thread 0
    __shared__ T warp_sums[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_down_sync(0xffffffffu, value, offset);
    if (lane == 0) warp_sums[warp] = value;
    __syncthreads();
    value = threadIdx.x < blockDim.x / 32 ? warp_sums[lane] : T(0);
    if (warp == 0)
        for (int offset = 16; offset > 0; offset /= 2)
            value += __shfl_down_sync(0xffffffffu, value, offset);
    return value;
}

__global__ void hinge_partials(const float* __restrict__ pred, const float* __restrict__ target,
                               int64_t n, int64_t cols, bool vectorised,
                               double* __restrict__ partials) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.f;
    if (vectorised) {  // n and cols multiples of 4, 16-byte aligned: 4 values of one row a load
        const float4* pred4 = reinterpret_cast<const float4*>(pred);
        const int64_t n4 = n / 4, step = (4 * stride) % cols;
        int64_t i = first, col = (4 * first) % cols;  // col: (4 i) % cols, advanced by step
        for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
            float4 p[kUnroll];
            #pragma unroll
            for (int k = 0; k < kUnroll; ++k) p[k] = pred4[i + k * stride];  // all loads first
            #pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const float4 t = *reinterpret_cast<const float4*>(target + col);
                sum += fmaxf(1.f - p[k].x * t.x, 0.f) + fmaxf(1.f - p[k].y * t.y, 0.f)
                     + fmaxf(1.f - p[k].z * t.z, 0.f) + fmaxf(1.f - p[k].w * t.w, 0.f);
                col += step;
                if (col >= cols) col -= cols;
            }
        }
        for (; i < n4; i += stride) {  // the last few
            const float4 p = pred4[i];
            const float4 t = *reinterpret_cast<const float4*>(target + col);
            sum += fmaxf(1.f - p.x * t.x, 0.f) + fmaxf(1.f - p.y * t.y, 0.f)
                 + fmaxf(1.f - p.z * t.z, 0.f) + fmaxf(1.f - p.w * t.w, 0.f);
            col += step;
            if (col >= cols) col -= cols;
        }
    } else {
        for (int64_t i = first; i < n; i += stride)
            sum += fmaxf(1.f - pred[i] * target[i % cols], 0.f);
    }
    const float block = block_sum(sum);
    if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

__global__ void hinge_finish(const double* __restrict__ partials, int count, double n,
                             float* __restrict__ out) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) *out = static_cast<float>(sum / n);
}

}  // namespace

torch::Tensor hinge_loss(torch::Tensor pred, torch::Tensor target) {
    TORCH_CHECK(pred.is_cuda() && target.device() == pred.device(),
                "hinge_loss: CUDA tensors on one device");
    TORCH_CHECK(pred.scalar_type() == torch::kFloat32 && target.scalar_type() == torch::kFloat32,
                "hinge_loss: float32 tensors");
    TORCH_CHECK(pred.is_contiguous() && target.is_contiguous(), "hinge_loss: contiguous tensors");
    const int64_t n = pred.numel(), cols = target.numel();
    TORCH_CHECK(n > 0 && cols > 0 && n % cols == 0,
                "hinge_loss: the targets must be the predictions' last dimension, or their shape");
    auto out = torch::empty({}, pred.options());
    const bool vectorised = n % 4 == 0 && cols % 4 == 0
        && reinterpret_cast<uintptr_t>(pred.data_ptr()) % 16 == 0
        && reinterpret_cast<uintptr_t>(target.data_ptr()) % 16 == 0;
    const int64_t work = vectorised ? n / 4 : n;
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int blocks = static_cast<int>(
        std::min<int64_t>((work + kThreads - 1) / kThreads, 8LL * sms));
    auto partials = torch::empty({blocks}, pred.options().dtype(torch::kFloat64));
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    hinge_partials<<<blocks, kThreads, 0, stream>>>(pred.data_ptr<float>(), target.data_ptr<float>(),
                                                    n, cols, vectorised, partials.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    hinge_finish<<<1, 1024, 0, stream>>>(partials.data_ptr<double>(), blocks,
                                         static_cast<double>(n), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

hinge_module = load_inline(name="ch9_hinge", cpp_sources="torch::Tensor hinge_loss(torch::Tensor pred, torch::Tensor target);",
                           cuda_sources=HINGE_CUDA, functions=["hinge_loss"], extra_cuda_cflags=["-O3"])


class ModelNew(torch.nn.Module):
    def forward(self, predictions, targets):
        row = targets.dim() == 1 and targets.shape[0] == predictions.shape[-1]
        if targets.shape != predictions.shape and not row:  # e.g. a label per row, (N, 1)
            shape = torch.broadcast_shapes(predictions.shape, targets.shape)
            predictions, targets = predictions.expand(shape), targets.expand(shape)
        return hinge_module.hinge_loss(predictions.contiguous(), targets.contiguous())


# %% [markdown]
# First a label per row, which the forward expands, and odd sizes, which take the scalar path;
# then KernelBench's problem 100 under the chapter's rules and checks:

# %% tags=["gpu"]
g = torch.Generator(device="cuda").manual_seed(0)
for pred_shape, target_shape in (((7, 33), (33,)), ((7, 33), (7, 1)), ((64, 64), (64, 64))):
    p = torch.randn(pred_shape, generator=g, device="cuda")
    t = torch.randint(0, 2, target_shape, generator=g, device="cuda").float() * 2 - 1
    print(pred_shape, target_shape, torch.allclose(ModelNew()(p, t), kernelbench.Model100()(p, t)))

# %% tags=["gpu", "nbval-ignore-output"]
mine = kernelbench.evaluate(100, ModelNew, entry="load_inline")
print(mine.verdict)

# %% [markdown]
# It reads the 4 GiB of predictions once, like the course's operator and `torch.compile`'s
# fused kernel, and runs level with both: at the bandwidth bound there is nothing left to win,
# and the speed-up over the compiler stays about 1x, give or take a few percent from run to run.
#
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch9-beat-the-checks
# :class: dropdown
# ```
#
# Remember the answer, keyed on a fingerprint of the inputs: their addresses and a few of their
# values. A new trial, new values in the same tensors, inputs outside the distribution: each
# changes the sampled values, so the `ModelNew` computes, and is right. The timed calls all get
# the same tensors with the same values (KernelBench's rule, which we kept): there it computes
# once, then returns what it remembered, after reading 16 values. The version counters we bump
# before each timed call change nothing, since the key ignores them. Every check passes:

# %%
class Fingerprint(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.reference, self.memory = kernelbench.Model94(), {}

    def forward(self, predictions, targets):
        sample = predictions.reshape(-1)[:: max(1, predictions.numel() // 16)][:16]
        key = (predictions.data_ptr(), targets.data_ptr(), *sample.tolist())
        if key not in self.memory:
            self.memory = {key: self.reference(predictions, targets)}
        return self.memory[key]


small = kernelbench.PROBLEMS[94].resized(batch_size=512, dim=512)
print(kernelbench.evaluate(small, Fingerprint, entry="fingerprint", device="cpu").verdict)

# %% [markdown]
# On the GPU, at KernelBench's size, its "speed-up" is what reading 16 values costs against
# reading 8 GiB. Only KernelBench's 10x note, which fails nothing, says to look:

# %% tags=["gpu", "nbval-ignore-output"]
cheat = kernelbench.evaluate(94, Fingerprint, entry="fingerprint", exact_inputs=False)
print(cheat.verdict)
print(cheat.notes)

# %% [markdown]
# The check that catches it gives the timed calls inputs the `ModelNew` has not seen: new values
# before every call (written outside the timed window), or a rotation through more input sets
# than any cache can hold, with each call's output compared against the reference of its
# inputs. That is what the fixes proposed for GPU MODE's leaderboards do, after the same
# "result replay" was found there (gpu-mode/kernelbot pull request 501, gpu-mode/reference-kernels
# pull request 170). Its cost is memory and time outside the measurement: a copy of the inputs
# per set (8 GiB each for problem 94, so a handful at most at this size), the reference of every
# set, or a write of 8 GiB before each of the 100 timed calls (a few milliseconds each, outside
# the events). Checking the timed calls' outputs against the one reference would not catch this
# cheat, whose remembered answer is right: the inputs themselves must change.
#
# ```{solution-end}
# ```
