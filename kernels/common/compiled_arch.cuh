// The virtual architecture a kernel was compiled for, as it is loaded on the current device (75
// for a build of compute_75 PTX that the driver compiled for an H100). Paths that need Hopper's
// instructions (clusters, programmatic dependent launch) ask this rather than the device's
// compute capability: a build for older GPUs has no such instructions in its kernels.
#pragma once
#include <cuda_runtime.h>

template <class Kernel>
static inline int compiled_arch(Kernel kernel) {
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess ? attributes.ptxVersion : 0;
}
