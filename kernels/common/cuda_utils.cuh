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
