// Chapter 7's extra cross-entropy op, compiled after cross_entropy.cpp (whose checks it uses) for a
// kernel file that defines cross_entropy_into_logits_launch (kernels/codegen.py, OP_VARIANTS):
//     cross_entropy_into_logits(logits, target, ignore_index, reduction, label_smoothing,
//                               grad_factor=None) -> loss
// It writes the gradient over the logits (mean or sum), times *grad_factor when given: one float32
// on the GPU (the fused head's 1 / count of all its chunks' targets), read by the kernel as the
// loss-scaling guess is (guess_factor: outside [2^-32, 2^32] it counts as 1).

// The fused gradient written over the logits (chapter 7's fused linear + cross-entropy: its logits
// are a scratch chunk, so the gradient needs no memory of its own). The kernel file's launcher
// guarantees that each value of a row is read before the gradient is written there.
template <CrossEntropyLauncher launch>
at::Tensor cross_entropy_into_logits_op(at::Tensor& logits, const at::Tensor& target,
                                        int64_t ignore_index, int64_t reduction,
                                        double label_smoothing,
                                        const std::optional<at::Tensor>& grad_factor) {
    check_logits_target(logits, target);
    const float* factor = guess_pointer(grad_factor, logits, "grad_factor");
    TORCH_CHECK(logits.is_contiguous() && reinterpret_cast<uintptr_t>(logits.data_ptr()) % 16 == 0,
                "logits must be contiguous and 16-byte aligned: the gradient is written over them");
    TORCH_CHECK(reduction == REDUCTION_MEAN || reduction == REDUCTION_SUM,
                "the gradient over the logits needs reduction 1 (mean) or 2 (sum)");
    TORCH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                "label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
    const auto options = logits.options();
    const int64_t rows = logits.size(0);
    if (rows == 0) return at::full({}, reduction == REDUCTION_MEAN ? NAN : 0.0, options);
    TORCH_CHECK(logits.size(1) > 0, "logits have no classes (shape ", shape_of(logits), ")");
    const c10::cuda::CUDAGuard guard(logits.device());
    const at::Tensor target_c = target.contiguous();
    at::Tensor loss = at::empty({}, options);
    at::Tensor bad = at::empty({}, options.dtype(at::kInt));
    at::Tensor workspace = at::empty({CE_WORKSPACE_BYTES(rows)}, options.dtype(at::kByte));
    CrossEntropyArgs args{};
    args.logits = logits.data_ptr();
    args.target = target_c.data_ptr<int64_t>();
    args.rows = rows;
    args.classes = logits.size(1);
    args.logits_dtype = logits_dtype_code(logits);
    args.reduction = static_cast<int>(reduction);
    args.ignore_index = ignore_index;
    args.label_smoothing = label_smoothing;
    args.out = loss.data_ptr();
    args.grad = logits.data_ptr();
    args.grad_guess = factor;
    args.bad_target = bad.data_ptr<int>();
    args.workspace = workspace.data_ptr();
    raise_on(launch(&args, c10::cuda::getCurrentCUDAStream()));
    return loss;
}

#define CROSS_ENTROPY_INTO_LOGITS_SCHEMA                                                       \
    "(Tensor(a!) logits, Tensor target, int ignore_index, int reduction, "                    \
    "float label_smoothing, Tensor? grad_factor=None) -> Tensor"
