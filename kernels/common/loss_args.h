// The contract between a kernel file (.cu) and its Python binding (kernels/bindings/*.cpp).
// Plain C structs: the binding fills them from tensors it has already checked, the kernel
// file's launcher reads them. Keeping torch out of the .cu files is what makes a build take
// seconds instead of a minute (see book/timing.md).
#pragma once
#include <stdint.h>

// Scratch memory the binding hands to every launcher: 64 KiB (a few counters, one partial per
// block of any grid) plus 4 bytes for every 1024 inputs (one float partial per 1024 elements).
// The launcher must not assume anything about its contents.
#define LOSS_WORKSPACE_BYTES(n) (64 * 1024 + 4 * ((n) / 1024 + 1))

// Element-wise losses reduced to a mean: MSE, Smooth L1, Hinge.
struct ReductionArgs {
    const float* pred;   // n values, contiguous
    const float* target; // target_len values; pred[i] pairs with target[i % target_len]
    int64_t n;           // > 0 (the binding answers empty inputs itself)
    int64_t target_len;  // == n, or the length of a trailing suffix of pred's shape (broadcast)
    float* out;          // the 0-d result: uninitialised, the launcher must write it
    void* workspace;     // LOSS_WORKSPACE_BYTES(n), uninitialised
};

// Cross-entropy over the rows of a (rows x classes) matrix of logits (chapter 5).
// A kernel file defines up to three launchers taking this struct, one per op (kernels/load.py):
//   cross_entropy_launch             forward: losses, and optionally lse or the fused gradient
//   cross_entropy_backward_launch    gradient from the saved lse (reduction "none")
//   cross_entropy_scale_grad_launch  grad *= grad_output, read on the device (mean / sum)
enum LogitsDtype { LOGITS_F32 = 0, LOGITS_BF16 = 1, LOGITS_F16 = 2, LOGITS_F64 = 3 };
enum Reduction { REDUCTION_NONE = 0, REDUCTION_MEAN = 1, REDUCTION_SUM = 2 };

// Scratch for cross-entropy: 64 KiB for counters, then up to 24 bytes per row (per-row losses, or
// one (sum, count, flag) partial per tile of rows, before the fixed-order sum).
#define CE_WORKSPACE_BYTES(rows) (64 * 1024 + 24 * ((rows) + 1))

// "acc" below is float, or double when logits are float64 (the gradcheck path).
struct CrossEntropyArgs {
    const void* logits;       // rows x classes, contiguous, of logits_dtype
    const int64_t* target;    // rows class indices (int64, as PyTorch)
    int64_t rows;             // > 0 (the binding answers empty inputs itself)
    int64_t classes;          // > 0
    int logits_dtype;         // LogitsDtype
    int reduction;            // Reduction
    int64_t ignore_index;     // rows whose target equals it add nothing (PyTorch's default -100)
    double label_smoothing;   // in [0, 1]; 0 for plain cross-entropy (double: exact for fp64)
    void* out;                // logits_dtype: reduction NONE -> rows losses, else the 0-d result
    void* lse;                // rows acc log-sum-exp values saved for backward, or NULL
    void* grad;               // rows x classes of logits_dtype, or NULL. Forward: the fused
                              // gradient, times grad_guess. Backward ops: the result.
    const void* grad_output;  // backward ops: 0-d (scale_grad) or rows values, logits_dtype
    // The loss-scaling guess (guess_factor in cuda_utils.cuh): NULL, or one float, a guess of
    // grad_output. The forward multiplies the fused gradient by it; scale_grad is given the
    // same one, multiplies by grad_output / guess and writes grad_output to next_guess.
    const float* grad_guess;
    float* next_guess;        // scale_grad only, or NULL
    int* bad_target;          // 0-d flag, always written: 1 when a target is out of range
    void* workspace;          // CE_WORKSPACE_BYTES(rows), uninitialised
};
