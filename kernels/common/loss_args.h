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

// Cross-entropy over the rows of a (rows x classes) matrix of logits.
enum LogitsDtype { LOGITS_F32 = 0, LOGITS_BF16 = 1, LOGITS_F16 = 2 };
enum Reduction { REDUCTION_NONE = 0, REDUCTION_MEAN = 1, REDUCTION_SUM = 2 };

struct CrossEntropyArgs {
    const void* logits;     // rows x classes, contiguous, of logits_dtype
    const int64_t* target;  // rows class indices (int64, as PyTorch)
    int64_t rows;
    int64_t classes;
    int logits_dtype;       // LogitsDtype
    int reduction;          // Reduction
    int64_t ignore_index;   // rows whose target equals it add nothing (PyTorch's default -100)
    float label_smoothing;  // 0 for plain cross-entropy
    float* out;             // reduction == NONE: rows losses; else the 0-d result
    float* lse;             // rows log-sum-exp values saved for backward, or NULL
    void* grad;             // rows x classes gradient of the logits' dtype, or NULL (no backward)
    int* bad_target;        // device flag, set to 1 when a target is out of range
    void* workspace;        // LOSS_WORKSPACE_BYTES(rows * classes), uninitialised
};
