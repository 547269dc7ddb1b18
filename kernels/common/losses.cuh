// The per-element part of each loss, as a functor: the reduction kernels from chapter 3 on are
// templates over one of these, so a new element-wise loss is a few lines here.
// Each returns NaN for NaN input, as PyTorch does (note: fmaxf(NaN, 0) would return 0).
#pragma once

struct MseLoss {  // torch.mean((p - t) ** 2)
    __device__ __forceinline__ float operator()(float p, float t) const {
        const float d = p - t;
        return d * d;
    }
};

struct SmoothL1Loss {  // F.smooth_l1_loss(p, t), beta = 1
    __device__ __forceinline__ float operator()(float p, float t) const {
        const float d = fabsf(p - t);
        return d < 1.0f ? 0.5f * d * d : d - 0.5f;
    }
};

struct HingeLoss {  // torch.mean(torch.clamp(1 - p * y, min=0)), y in {-1, +1}
    __device__ __forceinline__ float operator()(float p, float y) const {
        const float margin = 1.0f - p * y;
        return margin < 0.0f ? 0.0f : margin;
    }
};
