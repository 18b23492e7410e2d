// The float types the kernels are templated on (float, __half, __nv_bfloat16): loads widen to
// float and stores narrow from it, so every kernel computes in float32 whatever it reads and
// writes. KC_FLOAT_DISPATCH picks the type from a kiln dtype number at the launcher.
#ifndef KN_CUDA_KERNELS_FLOAT_CUH
#define KN_CUDA_KERNELS_FLOAT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// kiln_dtype numbers of the float types.
enum { KC_DT_F32 = 1, KC_DT_F16 = 10, KC_DT_BF16 = 16 };

__device__ __forceinline__ float kc_widen(float v) {
    return v;
}
__device__ __forceinline__ float kc_widen(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float kc_widen(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T kc_narrow(float v);
template <> __device__ __forceinline__ float kc_narrow<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __half kc_narrow<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 kc_narrow<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Runs the statement with T bound to the float type of kiln dtype dt; other dtypes return
// cudaErrorNotSupported from the enclosing launcher.
#define KC_FLOAT_DISPATCH(dt, T, ...)                                                              \
    switch (dt) {                                                                                  \
    case KC_DT_F32: {                                                                              \
        using T = float;                                                                           \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case KC_DT_F16: {                                                                              \
        using T = __half;                                                                          \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case KC_DT_BF16: {                                                                             \
        using T = __nv_bfloat16;                                                                   \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default:                                                                                       \
        return (int)cudaErrorNotSupported;                                                         \
    }

#endif
