// Programmatic dependent launch (compute capability 9 on; PTX griddepcontrol), for a small
// kernel that finishes what a large one started (chapter 4's pass 2, chapter 5's final sums).
// The large kernel calls let_next_kernel_start() as it begins: once all its blocks have, the
// kernel queued after it may be scheduled, so that kernel's launch latency hides behind the
// large kernel's last blocks. The small kernel calls wait_for_previous_kernel() before it reads
// anything the large one wrote: it returns once that grid has finished and its writes are
// visible. Both are no-ops in a kernel launched without the attribute, and compiled out before
// sm_90 or with -DDEPENDENT_LAUNCH=0 (bench/v5_ablation.py).
#pragma once
#include <cuda_runtime.h>

#include "compiled_arch.cuh"

#ifndef DEPENDENT_LAUNCH
#define DEPENDENT_LAUNCH 1
#endif

__device__ __forceinline__ void let_next_kernel_start() {
#if DEPENDENT_LAUNCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_previous_kernel() {
#if DEPENDENT_LAUNCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether this build of kKernel waits (its compiled architecture on the current device, asked
// once per device): a dependent launch of a kernel that does not wait could read what the
// previous kernel has not written yet.
template <auto kKernel>
static bool built_to_wait() {
    static int cached[64] = {0};  // 0: not asked yet, 1: no, 2: yes
    int device = 0;
    cudaGetDevice(&device);
    if (!DEPENDENT_LAUNCH || device >= 64) return false;
    if (cached[device] == 0) cached[device] = compiled_arch(kKernel) >= 90 ? 2 : 1;
    return cached[device] == 2;
}

// kKernel<<<grid, block, 0, stream>>>(args...), queued as a dependent launch where it waits.
template <auto kKernel, class... Args>
static cudaError_t launch_dependent(dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
    cudaLaunchAttribute early[1];
    early[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = stream;
    config.attrs = early;
    config.numAttrs = built_to_wait<kKernel>() ? 1 : 0;
    return cudaLaunchKernelEx(&config, kKernel, args...);
}
