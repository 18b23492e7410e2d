/* The one saturating store into integer tensors (quantization, Resize and Einsum on integers). */
#ifndef KN_CPU_SATURATE_H
#define KN_CPU_SATURATE_H

#include "backend/cpu/cpu.h"

/* Writes v to element i of an integer tensor, rounding half to even and saturating to the
 * type's range. NaN saturates low, as the ONNX reference and onnxruntime do. */
void kn_cpu_store_saturated(kn_tensor *t, int64_t i, double v);

#endif
