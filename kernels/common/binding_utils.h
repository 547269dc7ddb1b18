// Helpers shared by the bindings (kernels/bindings/*.cpp); never included by a .cu file.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

// A tensor's shape as text, e.g. "(3, 100)", for error messages. Streaming t.sizes() into
// TORCH_CHECK instead crashed the process (signal 11) with the minimal headers these bindings
// are built with, so the text is made here.
static inline std::string shape_of(const at::Tensor& t) {
    std::string s = "(";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + (t.dim() == 1 ? ",)" : ")");
}
