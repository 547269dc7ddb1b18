// The contract between the chapter 6 loss operators' binding (kernels/bindings/fused_loss.cpp)
// and a kernel file built on kernels/common/fused_loss.cuh. A plain C struct, as in loss_args.h.
#pragma once
#include <stdint.h>

#include "loss_args.h"  // Reduction, LOSS_WORKSPACE_BYTES

enum ValueDtype { VALUE_F32 = 0, VALUE_BF16 = 1, VALUE_F16 = 2 };

struct FusedLossArgs {
    const void* pred;         // n values of dtype, contiguous
    const void* target;       // target_len values of dtype; pred[i] pairs with target[i % target_len]
    int64_t n;                // > 0 (the binding answers empty inputs itself)
    int64_t target_len;       // == n, or the length of the last dimension (a broadcast row)
    int dtype;                // ValueDtype of pred, target, out and grad
    int reduction;            // Reduction
    float param;              // the loss's parameter (Smooth L1's beta), else unused
    void* out;                // reduction NONE: n values, else the 0-d result; always written
    void* grad;               // n values or NULL: d loss / d pred, times grad_guess
    const void* grad_output;  // the scale op only: one value of dtype
    // The loss-scaling guess (kernels/common/fused_loss.cuh): NULL, or one float, the
    // grad_output that the last backward of this loss saw. The forward multiplies the gradient
    // by it; the scale op is given the same tensor and divides it out again.
    const float* grad_guess;
    float* next_guess;        // the scale op only, or NULL: one float, set to grad_output
    void* workspace;          // LOSS_WORKSPACE_BYTES(n), uninitialised
};
