// The contract between chapter 8's kernel file (kernels/ch8_multi_gpu/*.cu) and its binding
// (kernels/bindings/vocab_shard.cpp): cross-entropy over logits split by vocabulary, each rank
// holding the columns [vocab_start, vocab_start + cols) of a vocabulary of vocab_size classes.
// A kernel file defines two launchers taking this struct, one per op (kernels/load.py):
//   shard_stats_launch  per row: the shard's max, sum of exp(x - max), the target's logit if
//                       this shard owns it (else 0), the sum of the logits (label smoothing)
//   shard_grad_launch   grad = row_scale * (softmax - (1 - eps) one_hot - eps / vocab_size),
//                       from the row's global log-sum-exp (after the all-reduce)
#pragma once
#include <stdint.h>

#include "loss_args.h"  // LogitsDtype

// The four per-row statistics of shard_stats, in this order (float32, rows x 4).
enum ShardStat { STAT_MAX = 0, STAT_SUM_EXP = 1, STAT_TARGET_LOGIT = 2, STAT_SUM_LOGITS = 3 };

struct VocabShardArgs {
    const void* logits;       // rows x cols, contiguous, of logits_dtype (not float64)
    const int64_t* target;    // rows global class indices, or ignore_index
    int64_t rows;             // > 0 (the binding answers empty inputs itself)
    int64_t cols;             // > 0: this shard's classes
    int logits_dtype;         // LogitsDtype
    int64_t vocab_start;      // the global index of this shard's first column
    int64_t vocab_size;       // the whole vocabulary: targets must lie in [0, vocab_size)
    int64_t ignore_index;     // rows whose target equals it own no target logit
    int want_sum;             // shard_stats: also sum the logits (only label smoothing needs it)
    float* stats;             // shard_stats: rows x 4 float32 (ShardStat)
    const float* lse;         // shard_grad: rows global log-sum-exp values
    const float* row_scale;   // shard_grad: rows factors (grad_output / count; 0 when ignored)
    float label_smoothing;    // shard_grad: eps in [0, 1]
    void* grad;               // shard_grad: rows x cols of logits_dtype
};
