// Binding for chapter 8's vocab-parallel cross-entropy: checks the tensors, allocates the
// outputs and calls a launcher of a kernel file taking VocabShardArgs. The loader
// (kernels/load.py) registers one op per launcher:
//     shard_stats(logits, target, vocab_start, vocab_size, ignore_index, want_sum) -> stats
//     shard_grad(logits, target, lse, row_scale, vocab_start, vocab_size, ignore_index,
//                label_smoothing) -> grad
// stats is (rows, 4) float32 (vocab_shard_args.h says what each column holds). The
// communication between the two ops is the caller's (kernels/vocab_parallel.py).
// Every argument is checked before any pointer is taken: bad input raises, never crashes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <string>

#include "binding_utils.h"
#include "vocab_shard_args.h"

using VocabShardLauncher = cudaError_t (*)(const VocabShardArgs*, cudaStream_t);

static int shard_dtype(const at::Tensor& logits) {
    switch (logits.scalar_type()) {
        case at::kFloat: return LOGITS_F32;
        case at::kBFloat16: return LOGITS_BF16;
        case at::kHalf: return LOGITS_F16;
        default:
            TORCH_CHECK(false, "logits must be float32, bfloat16 or float16, got ",
                        logits.scalar_type());
    }
    return -1;
}

static void check_shard(const at::Tensor& logits, const at::Tensor& target, int64_t vocab_start,
                        int64_t vocab_size) {
    TORCH_CHECK(logits.is_cuda() && target.is_cuda(), "logits and target must be CUDA tensors, got ",
                logits.device(), " and ", target.device());
    TORCH_CHECK(logits.device() == target.device(), "logits and target are on different devices: ",
                logits.device(), " and ", target.device());
    TORCH_CHECK(logits.dim() == 2, "a logits shard must be 2-D (rows x its classes), got shape ",
                shape_of(logits));
    TORCH_CHECK(target.scalar_type() == at::kLong, "target must hold int64 class indices, got ",
                target.scalar_type());
    TORCH_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), "target must have shape (",
                std::to_string(logits.size(0)), ",) for logits of shape ", shape_of(logits),
                ", got ", shape_of(target));
    TORCH_CHECK(logits.size(1) > 0, "a shard needs at least one class, got shape ",
                shape_of(logits));
    TORCH_CHECK(vocab_start >= 0 && vocab_start + logits.size(1) <= vocab_size,
                "the shard's columns [", std::to_string(vocab_start), ", ",
                std::to_string(vocab_start + logits.size(1)), ") must lie inside the vocabulary [0, ",
                std::to_string(vocab_size), ")");
}

// Contiguous, and 16-byte aligned so that rows can be read as 16-byte vectors.
static at::Tensor readable(const at::Tensor& logits) {
    at::Tensor out = logits.contiguous();
    if (reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 != 0) out = out.clone();
    return out;
}

static void raise_on(cudaError_t err) {
    TORCH_CHECK(err != cudaErrorNotSupported, "this kernel does not support these arguments");
    TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
}

template <VocabShardLauncher launch>
at::Tensor shard_stats_op(const at::Tensor& logits_in, const at::Tensor& target_in,
                          int64_t vocab_start, int64_t vocab_size, int64_t ignore_index,
                          bool want_sum) {
    check_shard(logits_in, target_in, vocab_start, vocab_size);
    const int dtype = shard_dtype(logits_in);
    const int64_t rows = logits_in.size(0);
    at::Tensor stats = at::empty({rows, 4}, logits_in.options().dtype(at::kFloat));
    if (rows == 0) return stats;
    const c10::cuda::CUDAGuard guard(logits_in.device());
    const at::Tensor logits = readable(logits_in);
    const at::Tensor target = target_in.contiguous();
    VocabShardArgs args{};
    args.logits = logits.data_ptr();
    args.target = target.data_ptr<int64_t>();
    args.rows = rows;
    args.cols = logits.size(1);
    args.logits_dtype = dtype;
    args.vocab_start = vocab_start;
    args.vocab_size = vocab_size;
    args.ignore_index = ignore_index;
    args.want_sum = want_sum ? 1 : 0;
    args.stats = stats.data_ptr<float>();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return stats;
}

static void check_per_row(const at::Tensor& t, const char* name, const at::Tensor& logits) {
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == logits.size(0) &&
                t.device() == logits.device(),
                name, " must be a float32 vector of one value per row on the logits' device, got ",
                t.scalar_type(), " of shape ", shape_of(t), " on ", t.device());
}

template <VocabShardLauncher launch>
at::Tensor shard_grad_op(const at::Tensor& logits_in, const at::Tensor& target_in,
                         const at::Tensor& lse_in, const at::Tensor& row_scale_in,
                         int64_t vocab_start, int64_t vocab_size, int64_t ignore_index,
                         double label_smoothing) {
    check_shard(logits_in, target_in, vocab_start, vocab_size);
    const int dtype = shard_dtype(logits_in);
    check_per_row(lse_in, "lse", logits_in);
    check_per_row(row_scale_in, "row_scale", logits_in);
    TORCH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                "label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
    const c10::cuda::CUDAGuard guard(logits_in.device());
    const at::Tensor logits = readable(logits_in);
    at::Tensor grad = at::empty_like(logits);
    if (logits.size(0) == 0) return grad;
    const at::Tensor target = target_in.contiguous();
    const at::Tensor lse = lse_in.contiguous();
    const at::Tensor row_scale = row_scale_in.contiguous();
    VocabShardArgs args{};
    args.logits = logits.data_ptr();
    args.target = target.data_ptr<int64_t>();
    args.rows = logits.size(0);
    args.cols = logits.size(1);
    args.logits_dtype = dtype;
    args.vocab_start = vocab_start;
    args.vocab_size = vocab_size;
    args.ignore_index = ignore_index;
    args.lse = lse.data_ptr<float>();
    args.row_scale = row_scale.data_ptr<float>();
    args.label_smoothing = static_cast<float>(label_smoothing);
    args.grad = grad.data_ptr();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return grad;
}

#define SHARD_STATS_SCHEMA                                                                     \
    "(Tensor logits, Tensor target, int vocab_start, int vocab_size, int ignore_index, "      \
    "bool want_sum) -> Tensor"
#define SHARD_GRAD_SCHEMA                                                                      \
    "(Tensor logits, Tensor target, Tensor lse, Tensor row_scale, int vocab_start, "          \
    "int vocab_size, int ignore_index, float label_smoothing) -> Tensor"
