/* One element in float for kernels that read scattered elements (sampling, quantization):
 * float32 directly, other types through the generic accessors. */
#ifndef KN_CPU_ELEMENT_ACCESS_H
#define KN_CPU_ELEMENT_ACCESS_H

#include "backend/cpu/cpu.h"

static inline float kn_cpu_load_f32(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)t->data)[i]
                                          : (float)kn_tensor_get_f64(t, i);
}

static inline void kn_cpu_store_f64(kn_tensor *t, int64_t i, double v) {
    if (t->dtype == KILN_DTYPE_FLOAT32)
        ((float *)t->data)[i] = (float)v;
    else
        kn_tensor_set_f64(t, i, v);
}

#endif
