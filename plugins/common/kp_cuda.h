/* The example plugins' CUDA launchers (built only with -DKILN_CUDA=ON, which defines
 * KP_CUDA). Each enqueues its kernels on the given cudaStream_t and never synchronizes, so
 * the plugins may declare their enqueue graph-safe. Each returns NULL on success or the CUDA
 * runtime's reason for a failed launch. */
#ifndef KP_CUDA_H
#define KP_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Swish: y = x * sigmoid(x) + bias[c], rows of `inner` elements, c = row % channels. half:
 * x, bias and y are float16 and the bias is first converted into ws (channels floats). */
const char *kp_swish_cuda(const void *x, const void *bias, void *y, int64_t rows, int64_t channels,
                          int64_t inner, int half, void *ws, void *stream);
/* ReluSigmoidMul: y = relu(x) * sigmoid(x) over n elements (float32 or, half, float16). */
const char *kp_relu_sigmoid_mul_cuda(const void *x, void *y, int64_t n, int half, void *stream);

#ifdef __cplusplus
}
#endif
#endif
