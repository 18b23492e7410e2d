/* Swish on the GPU: one thread per element, float arithmetic for both dtypes. The float16
 * bias is converted once per run into the device workspace, as the CPU path does on the
 * host. */
#include "../common/kp_cuda.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

static __global__ void bias_to_float(const __half *b, float *out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __half2float(b[i]);
}

template <typename T> static __device__ float load(const T *p, int64_t i);
template <> __device__ float load<float>(const float *p, int64_t i) {
    return p[i];
}
template <> __device__ float load<__half>(const __half *p, int64_t i) {
    return __half2float(p[i]);
}
static __device__ void store(float *p, int64_t i, float v) {
    p[i] = v;
}
static __device__ void store(__half *p, int64_t i, float v) {
    p[i] = __float2half_rn(v);
}

template <typename T>
static __global__ void swish(const T *x, const float *bias, T *y, int64_t n, int64_t channels,
                             int64_t inner) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = load(x, i);
        store(y, i, v / (1.0f + expf(-v)) + bias[(i / inner) % channels]);
    }
}

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? b : 65536); /* grid-stride past that */
}

extern "C" const char *kp_swish_cuda(const void *x, const void *bias, void *y, int64_t rows,
                                     int64_t channels, int64_t inner, int half, void *ws,
                                     void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int64_t n = rows * inner;
    if (half) {
        bias_to_float<<<blocks_for(channels), 256, 0, s>>>((const __half *)bias, (float *)ws,
                                                           channels);
        swish<__half><<<blocks_for(n), 256, 0, s>>>((const __half *)x, (const float *)ws,
                                                    (__half *)y, n, channels, inner);
    } else {
        swish<float><<<blocks_for(n), 256, 0, s>>>((const float *)x, (const float *)bias,
                                                   (float *)y, n, channels, inner);
    }
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? NULL : cudaGetErrorString(err);
}
