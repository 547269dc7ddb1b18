// How the kernels from chapter 5 on hold values: T in memory (float, bfloat16, half; double for
// gradcheck), A = AccOf<T> in arithmetic (float; double for double), 16-byte vectors of T, and
// exp(x - m) as one multiply and one MUFU.EX2.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

template <class T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ double to_acc(double x) { return x; }

template <class T> __device__ __forceinline__ T from_acc(float x);
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half(x); }
template <class T> __device__ __forceinline__ T from_acc(double x);
template <> __device__ __forceinline__ double from_acc<double>(double x) { return x; }

// kVec values of T loaded or stored as one access (LDG.128 / STG.128 when kVec * sizeof(T) == 16).
template <class T, int kVec> struct alignas(sizeof(T) * kVec) Vec { T v[kVec]; };

constexpr float kLog2e = 1.4426950408889634f;
// exp(x - m): x - m is exact near the max (Sterbenz), then one MUFU.EX2 (ex2.approx) instead of
// expf's ~8 instructions: with expf, bf16 rows run out of instruction issue before memory
// bandwidth (chapter 5). Results below 2^-126 flush to 0, which changes no sum; -inf - m gives
// 0; NaN stays NaN.
__device__ __forceinline__ float exp_diff(float x, float m) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((x - m) * kLog2e));
    return y;
}
__device__ __forceinline__ double exp_diff(double x, double m) { return exp(x - m); }
