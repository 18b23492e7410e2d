// The fused activations of Conv and Gemm epilogues (KC_ACT_*), in float32: shared by the
// epilogue kernel and the kernels that apply an activation in their own store (depthwise conv).
#ifndef KN_CUDA_KERNELS_ACTIVATE_CUH
#define KN_CUDA_KERNELS_ACTIVATE_CUH

#include "backend/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

__device__ __forceinline__ float kc_activate(int act, float v, float a, float b) {
    switch (act) {
    case KC_ACT_RELU:
        return v < 0.f ? 0.f : v;
    case KC_ACT_CLIP: {
        float lo = v < a ? a : v;
        return lo > b ? b : lo;
    }
    case KC_ACT_SIGMOID:
        return 1.f / (1.f + expf(-v));
    case KC_ACT_SWISH:
        return v / (1.f + expf(-v));
    case KC_ACT_LEAKY:
        return v < 0.f ? a * v : v;
    case KC_ACT_HARD_SIGMOID: {
        float h = a * v + b;
        h = h < 0.f ? 0.f : h;
        return h > 1.f ? 1.f : h;
    }
    case KC_ACT_HARD_SWISH: {
        float h = v * (1.f / 6.f) + 0.5f;
        h = h < 0.f ? 0.f : h;
        return v * (h > 1.f ? 1.f : h);
    }
    case KC_ACT_GELU:
        return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case KC_ACT_GELU_TANH:
        return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case KC_ACT_MISH:
        return v * tanhf(log1pf(expf(v)));
    case KC_ACT_TANH:
        return tanhf(v);
    default:
        return v;
    }
}

// The activation of a kernel whose output type is T. Outputs of 16 bits (float16, bfloat16)
// take sigmoid and SiLU through the fast exponential and division (__expf, __fdividef: a few
// float32 ulps, far below the output's rounding): the accurate expf and IEEE division cost
// about 25 instructions a value, which in the depthwise kernel's store (EfficientNet-B0's SiLU)
// outnumbered the window's multiply-adds. Float32 outputs stay exact (kc_activate). Limits as
// kc_activate's: sigmoid(-inf) = 0, SiLU(-inf) = NaN, NaN stays NaN.
template <typename T>
__device__ __forceinline__ float kc_activate_t(int act, float v, float a, float b) {
    if (sizeof(T) == 2) {
        if (act == KC_ACT_SIGMOID)
            return __fdividef(1.f, 1.f + __expf(-v));
        if (act == KC_ACT_SWISH)
            return __fdividef(v, 1.f + __expf(-v));
    }
    return kc_activate(act, v, a, b);
}

#endif
