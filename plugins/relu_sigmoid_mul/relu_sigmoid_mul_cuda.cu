/* ReluSigmoidMul on the GPU: t = max(x, 0) (NaN stays NaN), y = t / (1 + e^-t), float
 * arithmetic for both dtypes; float32 moves four elements per thread when the pointers allow. */
#include "../common/kp_cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

static __device__ float rsm(float x) {
    float t = x <= 0.0f ? 0.0f : x;
    return t / (1.0f + expf(-t));
}

static __global__ void rsm_f32x4(const float4 *x, float4 *y, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_float4(rsm(v.x), rsm(v.y), rsm(v.z), rsm(v.w));
    }
}

static __global__ void rsm_f32(const float *x, float *y, int64_t begin, int64_t n) {
    for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = rsm(x[i]);
}

static __global__ void rsm_f16(const __half *x, __half *y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(rsm(__half2float(x[i])));
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b < 65536 ? b : 65536); /* grid-stride past that */
}

extern "C" const char *kp_relu_sigmoid_mul_cuda(const void *x, void *y, int64_t n, int half,
                                                void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (half) {
        rsm_f16<<<blocks_for(n), 256, 0, s>>>((const __half *)x, (__half *)y, n);
    } else {
        int64_t n4 = ((uintptr_t)x | (uintptr_t)y) % 16 == 0 ? n / 4 : 0;
        if (n4 > 0)
            rsm_f32x4<<<blocks_for(n4), 256, 0, s>>>((const float4 *)x, (float4 *)y, n4);
        if (n4 * 4 < n)
            rsm_f32<<<blocks_for(n - n4 * 4), 256, 0, s>>>((const float *)x, (float *)y, n4 * 4, n);
    }
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? NULL : cudaGetErrorString(err);
}
