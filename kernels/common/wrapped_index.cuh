// The target index of a grid-stride loop over a broadcast target (Hinge's row), kept modulo
// target_len without a division per element.
//
// Why a header: chapter 3's version 6 and chapter 4's version 1 each define the same struct;
// the staged chapter 3 steps (bench/experiments/ch3_steps) include it from here, and chapter 4
// can too when its files next change. No kernel of the chapters includes it yet, so adding it
// made no notebook stale.
#pragma once
#include <stdint.h>

// pred[i] pairs with target[i % len]. A thread's i advances by a fixed stride, so its target
// index advances by (stride mod len), brought back into [0, len) by one compare and subtract:
// two divisions when the thread starts, none per element. len may be any size up to n.
struct WrappedIndex {
    uint64_t at, step, len;
    __device__ WrappedIndex(uint64_t start, uint64_t stride, uint64_t length)
        : at(start % length), step(stride % length), len(length) {}
    __device__ __forceinline__ void advance() {
        at += step;
        if (at >= len) at -= len;
    }
};
