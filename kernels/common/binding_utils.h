// Helpers shared by the bindings (kernels/bindings/*.cpp); never included by a .cu file.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

// A tensor's shape as text, e.g. "(3, 100)", for error messages. Streaming t.sizes() into
// TORCH_CHECK instead crashed the process (signal 11) with the minimal headers these bindings
// are built with, so the text is made here.
static inline std::string shape_of(const at::Tensor& t) {
    std::string s = "(";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + (t.dim() == 1 ? ",)" : ")");
}

// A guess of grad_output (kernels/ops/grad_guess.py) or a factor of the same kind, passed as the
// argument `name`: one float32 on the device of `like`, or nothing.
static inline const float* guess_pointer(const std::optional<at::Tensor>& guess,
                                         const at::Tensor& like, const char* name = "grad_guess") {
    if (!guess.has_value()) return nullptr;
    TORCH_CHECK(guess->numel() == 1 && guess->scalar_type() == at::kFloat &&
                guess->device() == like.device(),
                name, " must be one float32 value on ", like.device(), ", got ",
                guess->scalar_type(), " of shape ", shape_of(*guess), " on ", guess->device());
    return guess->data_ptr<float>();
}

// What a scale op of a forward's gradient returns: the next guess, grad_output as one float32 on
// the gradient's device. A new tensor for the kernel to write, or, when the gradient is empty
// and no kernel runs, grad_output's value itself.
static inline at::Tensor next_guess_for(const at::Tensor& grad, const at::Tensor& grad_output) {
    TORCH_CHECK(grad_output.numel() == 1 && grad_output.device() == grad.device() &&
                grad_output.scalar_type() == grad.scalar_type(),
                "grad_output must be one value of the gradient's dtype and device");
    if (grad.numel() == 0) return grad_output.reshape({}).to(at::kFloat).clone();
    return at::empty({}, grad.options().dtype(at::kFloat));
}
