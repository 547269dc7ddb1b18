// Small helpers every kernel file shares.
#pragma once
#include <cuda_runtime.h>

// Number of streaming multiprocessors of the current device, asked once per process and device.
static inline int sm_count() {
    static int cached[64] = {0};
    int device = 0;
    cudaGetDevice(&device);
    if (device < 64 && cached[device] == 0)
        cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device);
    return device < 64 ? cached[device] : 1;
}

// Blocks of `threads` threads that fit on the whole GPU at once. Grid-stride kernels launch
// exactly this many: more would wait for a second wave and finish late, fewer leave SMs idle.
template <class Kernel>
static inline int64_t resident_blocks(Kernel kernel, int threads, size_t shared_bytes = 0) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared_bytes);
    return static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * sm_count();
}

static inline bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The loss-scaling guess (kernels/ops/grad_guess.py): a forward multiplies the gradient it writes
// by a guess of grad_output, and the backward's scale op divides it out again. The factor a guess
// stands for is the guess, unless it is missing or so small or large that gradient * guess could
// leave float's range where gradient * grad_output would not (0, inf and NaN included): then 1.
// The forward and the scale op must agree on it, so both call this.
__device__ __forceinline__ float guess_factor(const float* guess) {
    if (guess == nullptr) return 1.0f;
    const float g = fabsf(*guess);
    return g >= 0x1p-32f && g <= 0x1p32f ? *guess : 1.0f;
}
